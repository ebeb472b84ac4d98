"""Take the documentation's picture of the Server panel, after a minute of real traffic on the local server.

    .venv/bin/python scripts/server_screenshots.py   # offscreen: assets/server-panel.png (about a minute)

The real window with the bundled model and its local server, in a scratch data folder that is deleted
afterwards. Two device keys ("laptop", "phone") and the settings key send real chat requests in
bursts (some concurrent, so that a few wait in the queue), and the window sends one reply of its own;
then Performance → Local server… opens the panel on its last minute, and the picture is taken.
"""
from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = ("Name a fruit.", "Write a haiku about rain.", "What is 12 times 7?", "Describe a cat in one sentence.",
           "List three colours.", "Say hello in French.", "What is the capital of Italy?", "Count to ten.")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def traffic(url: str, model: str, keys: dict[str, str], errors: list[str]) -> None:
    """Bursts over about 40 s: each (seconds from the start, key, concurrent requests, max_tokens)."""
    import openai

    plan = [(0, "laptop", 5, 16), (6, "phone", 2, 12), (11, "settings", 1, 24), (16, "laptop", 3, 12),
            (24, "phone", 4, 16), (31, "laptop", 2, 8), (36, "settings", 2, 16)]
    t0 = time.monotonic()
    for i, (at, who, n, max_tokens) in enumerate(plan):
        time.sleep(max(0.0, t0 + at - time.monotonic()))
        client = openai.OpenAI(base_url=url, api_key=keys[who], max_retries=0, timeout=300)

        def ask(j: int, client=client, max_tokens=max_tokens, i=i) -> None:
            try:
                client.chat.completions.create(model=model, max_tokens=max_tokens, temperature=0.7, seed=i * 10 + j,
                                               messages=[{"role": "user", "content": PROMPTS[(i + j) % len(PROMPTS)]}])
            except Exception as e:  # said at the end: a picture of a failing server is no picture
                errors.append(f"{who}: {e}")

        threads = [threading.Thread(target=ask, args=(j,)) for j in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def take(out: Path) -> None:
    from engine.serve.http.other_devices import key_ring

    from app.core.paths import data_dir
    from app.core.settings import Settings, SettingsFile
    from app.settings_ui.settings_server_tab import new_api_key
    from app.window.main_window import MainWindow
    from app.window.selftest import wait_until

    ring = key_ring(data_dir())
    keys = {"laptop": ring.create("laptop")[1], "phone": ring.create("phone")[1], "settings": new_api_key()}
    port = free_port()
    s = replace(Settings(), server_enabled=True, server_port=port, server_api_key=keys["settings"])
    s.sampling.update({"temperature": 0.0, "seed": 0, "max_tokens": 24})
    SettingsFile().save(s)
    win = MainWindow()
    win.show()
    win.start()
    if not wait_until(lambda: win.host.ready and win.server_host.server is not None
                      and win.server_host.server.model_id is not None, 120.0):
        raise RuntimeError("the model or its server did not start: " + " | ".join(win.info.messages()))
    srv = win.server_host.server
    errors: list[str] = []
    sender = threading.Thread(target=traffic, args=(f"http://127.0.0.1:{port}/v1", srv.model_id, keys, errors))
    sender.start()
    wait_until(lambda: False, 19.0)
    win.chat.input.setPlainText("Write two lines about the sea.")
    win.send("Write two lines about the sea.")
    if not wait_until(lambda: not sender.is_alive() and win.stream is None and srv.in_flight == 0, 240.0):
        raise RuntimeError("the requests did not end")
    if errors:
        raise RuntimeError("requests failed: " + " | ".join(errors))
    wait_until(lambda: False, 2.0)
    win.performance.act_server.trigger()
    panel = win.performance.server_panel
    panel.span.setCurrentIndex(0)  # the last minute: the traffic above fills it
    panel.resize(1200, 860)
    wait_until(lambda: False, 1.5)
    panel.refresh()
    if not panel.grab().save(str(out / "server-panel.png")):
        raise RuntimeError("could not write the picture")
    print(panel.summary.text())
    win.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=str(ROOT / "assets"), help="folder for the picture")
    args = p.parse_args()
    out = Path(args.out).resolve()
    sys.path[:0] = [str(ROOT)]
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv)
    from app.ui import theme

    theme.apply(app, "light")
    with tempfile.TemporaryDirectory(prefix="hearth-server-") as scratch:
        os.environ["HEARTH_DATA_DIR"] = scratch
        take(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
