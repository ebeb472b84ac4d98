"""Hub downloads against a local server that speaks the Hub's file protocol (HF_ENDPOINT):
resume after a dropped connection, cancel and resume, offline use of the cache, one
chosen GGUF file, refusals, and the result being a standard Hugging Face cache."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest

pytest.importorskip("huggingface_hub")

from engine.models import catalogue, hub  # noqa: E402
from engine.errors import HearthError  # noqa: E402
from hub_server import COMMIT, HubServer as FakeHub  # noqa: E402  (the local Hub, shared with the browser tests)
from engine.config import EngineConfig


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory):
    from tiny_hf import make_tiny_model

    d = make_tiny_model(tmp_path_factory.mktemp("hubsrc") / "m")
    return {p.name: p.read_bytes() for p in d.iterdir() if p.is_file()}


@pytest.fixture
def fake(tiny_files, monkeypatch, tmp_path):
    big = bytes(range(256)) * 2048  # 512 KiB, several chunks
    repos = {
        "hearth/tiny": dict(tiny_files, **{"README.md": b"# tiny\n", "extra/onnx/model.onnx": b"x" * 10}),
        "hearth/tiny-GGUF": {"tiny.Q4_K_M.gguf": big, "tiny.Q8_0.gguf": big[::-1], "tiny.f16.gguf": b"f" * 3000,
                             "README.md": b"# gguf\n"},
        "hearth/pickled": {"config.json": b'{"model_type": "llama"}', "pytorch_model.bin": b"p" * 2000},
    }
    srv = FakeHub(repos)
    monkeypatch.setenv("HF_ENDPOINT", srv.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hfcache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    yield srv
    srv.close()


def test_downloads_a_model_into_the_standard_cache(fake, tiny_files, tmp_path):
    seen = []
    snap = hub.download("hearth/tiny", progress=lambda done, total, name: seen.append((done, total, name)))
    assert snap == tmp_path / "hfcache" / "models--hearth--tiny" / "snapshots" / COMMIT
    got = {p.name for p in snap.iterdir()}
    assert got == set(tiny_files)                # README and the onnx folder are not needed
    assert all((snap / n).read_bytes() == tiny_files[n] for n in got)
    total = sum(len(v) for v in tiny_files.values())
    assert seen[-1] == (total, total, "") and all(d <= t == total for d, t, _ in seen)
    assert (tmp_path / "hfcache" / "models--hearth--tiny" / "refs" / "main").read_text() == COMMIT
    # Any Hugging Face tool finds the files offline: the layout is the standard one.
    from huggingface_hub import hf_hub_download

    p = hf_hub_download("hearth/tiny", "config.json", cache_dir=tmp_path / "hfcache", local_files_only=True)
    assert Path(p).read_bytes() == tiny_files["config.json"]
    # A second call downloads nothing.
    n = len(fake.log)
    assert hub.download("hearth/tiny") == snap
    assert all(m != "GET" or "/resolve/" not in p for m, p, _ in fake.log[n:])


def test_resumes_after_a_dropped_connection(fake, tiny_files):
    size = len(tiny_files["model.safetensors"])
    fake.drop_after["model.safetensors"] = size // 3
    snap = hub.download("hearth/tiny")
    assert (snap / "model.safetensors").read_bytes() == tiny_files["model.safetensors"]
    assert fake.gets("model.safetensors") == [None, f"bytes={size // 3}-"]


def test_cancel_keeps_the_partial_file_and_the_next_call_resumes(fake, tiny_files, tmp_path):
    fake.throttle = 0.002
    cancel = threading.Event()

    start = []

    def progress(done, total, name):  # stop once part of the weights file has arrived
        if name == "model.safetensors":
            start.append(done)
            if done > start[0]:
                cancel.set()

    with pytest.raises(hub.DownloadCancelled):
        hub.download("hearth/tiny", progress=progress, cancel=cancel)
    blobs = tmp_path / "hfcache" / "models--hearth--tiny" / "blobs"
    partial = [p for p in blobs.iterdir() if p.name.endswith(".incomplete")]
    assert len(partial) == 1 and 0 < partial[0].stat().st_size < len(tiny_files["model.safetensors"])
    have = partial[0].stat().st_size
    fake.throttle = 0.0
    snap = hub.download("hearth/tiny")
    assert (snap / "model.safetensors").read_bytes() == tiny_files["model.safetensors"]
    assert fake.gets("model.safetensors")[-1] == f"bytes={have}-"
    assert not any(p.name.endswith(".incomplete") for p in blobs.iterdir())


def test_offline_uses_the_cache_and_says_so_when_it_cannot(fake, monkeypatch):
    with pytest.raises(hub.HubError, match="not in the Hugging Face cache"):
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        hub.download("hearth/tiny")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    snap = hub.download("hearth/tiny")
    n = len(fake.log)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub.download("hearth/tiny") == snap
    assert len(fake.log) == n                      # not a single request
    monkeypatch.delenv("HF_HUB_OFFLINE")
    # The network is gone (server down): the cache serves, with no error.
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    assert hub.download("hearth/tiny") == snap
    with pytest.raises(hub.HubError, match=r"cannot reach .* not in the Hugging Face cache"):
        hub.download("hearth/never-downloaded")


def test_fetches_only_the_chosen_gguf_file(fake):
    f = hub.download("hearth/tiny-GGUF", quant="Q4_K_M")
    assert f.name == "tiny.Q4_K_M.gguf" and f.stat().st_size == 512 * 1024
    assert {p.split("/")[-1] for m, p, _ in fake.log if m == "GET" and "/resolve/" in p} == {"tiny.Q4_K_M.gguf"}
    assert hub.download("hearth/tiny-GGUF", filename="tiny.f16.gguf").read_bytes() == b"f" * 3000
    with pytest.raises(hub.HubError, match="no GGUF file matching 'Q2_K'.*tiny.Q8_0.gguf"):
        hub.download("hearth/tiny-GGUF", quant="Q2_K")
    with pytest.raises(hub.HubError, match="GGUF files, pick one as hearth/tiny-GGUF:"):
        hub.download("hearth/tiny-GGUF")


def test_refusals_and_unknown_repos(fake):
    with pytest.raises(hub.HubError, match="only pickled PyTorch weights"):
        hub.download("hearth/pickled")
    snap = hub.download("hearth/pickled", allow_pickle=True)
    assert (snap / "pytorch_model.bin").stat().st_size == 2000
    with pytest.raises(hub.HubError, match="no model 'hearth/missing' on the Hugging Face Hub"):
        hub.download("hearth/missing")
    assert issubclass(hub.HubError, HearthError)


def test_hub_ids_and_split_gguf_selection():
    assert catalogue.is_hub_id("Qwen/Qwen2.5-0.5B-Instruct")
    assert catalogue.is_hub_id("bartowski/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M")
    assert catalogue.is_hub_id("owner/repo/sub/file.gguf")
    assert not catalogue.is_hub_id("models/missing.gguf") and not catalogue.is_hub_id("./a/b")
    assert not catalogue.is_hub_id("/abs/path") and not catalogue.is_hub_id("a/../b")
    assert catalogue.parse_hub_id("o/r:Q8_0") == ("o/r", None, "Q8_0")
    assert catalogue.parse_hub_id("o/r/x/y.gguf") == ("o/r", "x/y.gguf", None)
    names = ["m-Q4_K_M-00001-of-00002.gguf", "m-Q4_K_M-00002-of-00002.gguf", "m-Q8_0.gguf",
             "mmproj-m-Q4_K_M.gguf"]
    assert hub.select_gguf_files(names, filename=None, quant="q4_k_m") == names[:2]
    assert hub.select_gguf_files(names, filename=None, quant="Q8_0") == ["m-Q8_0.gguf"]


def test_engine_loads_a_hub_id(fake):
    from engine.engine import Engine
    from engine.models.catalogue import resolve

    ref = resolve("hearth/tiny")
    assert ref.kind == "hub"
    seen = []
    eng = Engine.open(EngineConfig("hearth/tiny", cache_budget=0), progress=lambda d, t, n: seen.append(d))
    assert eng.backend.name == "hf" and eng.model.kind == "hf_dir" and eng.model.label == "hearth/tiny"
    assert seen and eng.backend.forward([1, 2, 3]).shape == (eng.backend.n_vocab,)
    eng.close()


def test_the_hub_client_is_a_core_dependency():
    """The model library and Hub browser are in the window whatever the backend: a plain install
    (the README's run command, no `hf` extra) must bring huggingface_hub."""
    import tomllib
    from pathlib import Path

    meta = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())["project"]
    assert any(d.replace("_", "-").lower().startswith("huggingface-hub") for d in meta["dependencies"])


def test_a_vision_models_projector_comes_with_it_and_the_engine_pairs_it(tiny_vlm, monkeypatch, tmp_path):
    from engine.engine import Engine
    from engine.models.hub_files import projector_files

    model, mmproj = tiny_vlm
    names = ["v-Q8_0.gguf", "v-Q4_K_M.gguf", "mmproj-v-f32.gguf", "mmproj-v-f16.gguf", "sub/mmproj-x-f16.gguf"]
    assert projector_files(names, ["v-Q8_0.gguf"]) == ["mmproj-v-f16.gguf"]
    assert projector_files(["a-Q8_0.gguf"], ["a-Q8_0.gguf"]) == []
    srv = FakeHub({"hearth/vision-GGUF": {"tiny-vlm-Q8_0.gguf": model.read_bytes(),
                                          "mmproj-tiny-vlm-f16.gguf": mmproj.read_bytes(), "README.md": b"# v\n"}})
    monkeypatch.setenv("HF_ENDPOINT", srv.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hfcache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    try:
        from engine.library.hub_search import fit, repo_files
        from engine.models.projector import projector_memory
        from engine.sizing.hardware import simulated

        (entry,), _ = repo_files("hearth/vision-GGUF")  # the browser: the projector named on its model's row
        assert entry.name == "tiny-vlm-Q8_0.gguf" and entry.projector == "mmproj-tiny-vlm-f16.gguf"
        assert entry.projector_size == mmproj.stat().st_size
        _badge, _summary, spec = fit("hearth/vision-GGUF", entry, simulated(ram="16GiB"))
        assert spec.vision_bytes == sum(projector_memory(mmproj))  # the badge counts its eyes, from headers
        f = hub.download("hearth/vision-GGUF", quant="Q8_0")
        assert f.name == "tiny-vlm-Q8_0.gguf" and (f.parent / "mmproj-tiny-vlm-f16.gguf").is_file()
        e = Engine.open(EngineConfig("hearth/vision-GGUF:Q8_0", n_ctx=512, n_threads=2))
        try:
            assert e.backend.sees_images and e.backend.describe().projector.endswith("mmproj-tiny-vlm-f16.gguf")
        finally:
            e.close()
    finally:
        srv.close()
