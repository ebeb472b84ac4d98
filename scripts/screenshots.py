"""Take the documentation's pictures of the model library and the Hub browser, the same on any machine.

    .venv/bin/python scripts/screenshots.py    # offscreen; writes assets/library.png, assets/hub-browser.png

Everything lives in a scratch folder that is deleted afterwards (never the user's data, models or
Hugging Face cache): a few demo GGUFs in the models folder (real headers of real architectures, their
tensor data a sparse hole, so a "14B" file costs a few MB), and demo repositories served by the local
Hub of the tests (tests/hub_server.py, on 127.0.0.1) that huggingface_hub is pointed at with
HF_ENDPOINT. The fit badges are planned for a simulated machine (--gpu/--ram, as
``python -m engine.sizing`` takes them) so that the pictures do not depend on where they are taken.
Each picture is ``python -m app --screenshot PATH --show library|hub``'s, run in this process.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEMO_MODELS = (("Qwen2.5-7B-Instruct-Q4_K_M.gguf", "qwen2.5-7b", "Q4_K_M"),
               ("Llama-3.1-8B-Instruct-Q8_0.gguf", "llama-3.1-8b", "Q8_0"),
               ("Qwen2.5-14B-Instruct-Q4_K_M.gguf", "qwen2.5-14b", "Q4_K_M"),
               ("Qwen2.5-32B-Instruct-Q4_K_M.gguf", "qwen2.5-32b", "Q4_K_M"),
               ("Qwen2.5-14B-Instruct-F16.gguf", "qwen2.5-14b", "F16"))
DEMO_REPOS = {  # repo: (downloads, [(file, architecture, quantization)])
    "demo/Qwen2.5-7B-Instruct-GGUF": (52_000, [("qwen2.5-7b-instruct-q4_k_m.gguf", "qwen2.5-7b", "Q4_K_M"),
                                               ("qwen2.5-7b-instruct-q8_0.gguf", "qwen2.5-7b", "Q8_0"),
                                               ("qwen2.5-7b-instruct-f16.gguf", "qwen2.5-7b", "F16")]),
    "demo/Qwen2.5-14B-Instruct-GGUF": (31_000, [("qwen2.5-14b-instruct-q4_k_m.gguf", "qwen2.5-14b", "Q4_K_M")]),
    "demo/Qwen2.5-3B-Instruct-GGUF": (18_000, [("qwen2.5-3b-instruct-q4_k_m.gguf", "qwen2.5-3b", "Q4_K_M")]),
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=str(ROOT / "assets"), help="folder for library.png and hub-browser.png")
    p.add_argument("--gpu", default="8GiB", help="the simulated GPU the fit badges are planned for")
    p.add_argument("--ram", default="16GiB", help="the simulated RAM")
    p.add_argument("--theme", choices=("system", "light", "dark"), default="light")
    p.add_argument("--search", default="Qwen2.5", help="what the Hub browser searches for")
    args = p.parse_args()
    out = Path(args.out).resolve()
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    with tempfile.TemporaryDirectory(prefix="hearth-screenshots-") as scratch:
        return _take(Path(scratch), out, args)


def _take(scratch: Path, out: Path, args) -> int:
    from hub_server import HubServer, Sparse
    from model_files import gguf_bytes_header, write_model_gguf

    for name, arch, quant in DEMO_MODELS:
        write_model_gguf(scratch / "models" / name, arch, quant, name=name.removesuffix(".gguf"))
    repos, cards = {}, {}
    for repo, (downloads, files) in DEMO_REPOS.items():
        repos[repo] = {f: Sparse(*gguf_bytes_header(arch, f.removesuffix(".gguf"), quant)) for f, arch, quant in files}
        cards[repo] = {"tags": ["gguf"], "downloads": downloads, "likes": downloads // 400}
    hub = HubServer(repos, cards)
    # huggingface_hub reads some of these when it is imported: set them before anything imports it.
    os.environ.update(HEARTH_MODEL_DIR=str(scratch / "models"), HF_HUB_CACHE=str(scratch / "hf"),
                      HF_ENDPOINT=hub.url, HF_HUB_DISABLE_XET="1")
    os.environ.pop("HF_HUB_OFFLINE", None)
    try:
        from PySide6.QtWidgets import QApplication

        from app.window.selftest import take_screenshot
        from engine.sizing.hardware import simulated

        app = QApplication(sys.argv[:1])
        app.setApplicationName("Hearth")
        hw = simulated(args.gpu, args.ram)
        out.mkdir(parents=True, exist_ok=True)
        for page, file in (("library", "library.png"), ("hub", "hub-browser.png")):
            os.environ["HEARTH_DATA_DIR"] = str(scratch / f"data-{page}")  # each picture starts afresh
            if take_screenshot(str(out / file), theme=args.theme, show=page, search=args.search, hardware=hw):
                return 1
        return 0
    finally:
        hub.close()


if __name__ == "__main__":
    sys.exit(main())
