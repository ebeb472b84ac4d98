"""Shared fixtures. Integration tests run the real bundled model on the CPU."""
from __future__ import annotations

import os
import tempfile

from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# The command line (engine serve/chat, benchmarks) keeps its prompt cache, plan log and GPU marker in
# Hearth's data folder, like the window: tests and their subprocesses use a scratch one, never the user's.
os.environ.setdefault("HEARTH_DATA_DIR", tempfile.mkdtemp(prefix="hearth-tests-"))
# Hearth's default profile is "fast" (llama.cpp's own kernels). Most tests check that the prefix
# cache, speculation and batching give exactly what plain decoding gives: the exact profile's
# promise, so they run in it. The fast default's own tests unset this (test_exactness_default.py).
os.environ["HEARTH_EXACTNESS"] = "exact"
# A private sound server (tests/sound_server.py), running before Qt first looks for audio devices: the
# window's microphone and speaker are real QtMultimedia devices on it, never a developer's own.
SOUND = __import__("sound_server").start_for_session()


@pytest.fixture(autouse=True, scope="session")
def _http_calls_wait_for_a_busy_machine():
    """httpx's module-level calls wait 5 s by default; a test's request that makes the model reply (the
    local server's routes) can take longer on a loaded 2-core machine, and then failed as a timeout,
    though no test meant to time out. A test that gives its own timeout keeps it."""
    import functools

    import httpx

    saved = {name: getattr(httpx, name) for name in ("get", "post", "request", "stream")}

    def patient(fn):
        @functools.wraps(fn)
        def call(*args, **kw):
            kw.setdefault("timeout", 120.0)
            return fn(*args, **kw)
        return call
    for name, fn in saved.items():
        setattr(httpx, name, patient(fn))
    yield
    for name, fn in saved.items():
        setattr(httpx, name, fn)


@pytest.fixture(autouse=True)
def _closed_windows_are_deleted():
    """Windows a test closed are deleted after it: a closed top-level widget is only hidden, and hundreds of
    them left over from earlier tests made every later palette change re-style them all (the theme test took
    36 s in the suite and 0.5 s alone)."""
    yield
    import sys
    if "PySide6.QtWidgets" not in sys.modules:
        return
    from PySide6.QtCore import QCoreApplication, QEvent
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance()
    if not isinstance(app, QApplication):
        return
    for w in app.topLevelWidgets():
        if w.parent() is None and not w.isVisible():
            w.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


@pytest.fixture(scope="session")
def bundled_path():
    from engine.models.catalogue import bundled_model_path

    return bundled_model_path()


def _bench_model(which: str) -> Path:
    from engine.models import catalogue as models

    m = getattr(models, which)
    p = models.bench_model_path(m)
    assert p is not None, (f"{m.filename} is not here: scripts/test.sh fetches it "
                           "(python -m engine models fetch-bench-pair)")
    return p


@pytest.fixture(scope="session")
def qwen_coder_small() -> Path:
    """Qwen2.5-Coder-0.5B-Instruct Q4_K_M (real weights, real Qwen 2.5 template): a model that calls tools."""
    return _bench_model("BENCH_DRAFT")


@pytest.fixture(scope="session")
def qwen_coder() -> Path:
    """Qwen2.5-Coder-1.5B-Instruct Q4_K_M, the quant people download most."""
    return _bench_model("BENCH_TARGET")


@pytest.fixture(scope="session")
def kquant_path(bundled_path, tmp_path_factory):
    """The bundled model requantized to Q4_K_M with llama.cpp's own quantizer
    (~2 s): K-quant kernels behave differently from the bundled Q4_1 ones."""
    import llama_cpp as lc

    out = tmp_path_factory.mktemp("kquant") / "smollm2-135m-q4_k_m.gguf"
    params = lc.llama_model_quantize_default_params()
    params.ftype = lc.LLAMA_FTYPE_MOSTLY_Q4_K_M
    params.allow_requantize = True
    params.nthread = 2
    assert lc.llama_model_quantize(str(bundled_path).encode(), str(out).encode(), params) == 0
    return out


@pytest.fixture(scope="session")
def llama_backend(bundled_path):
    """One shared backend for tests that only tokenize or read metadata."""
    from engine.backends.llama.backend import LlamaCppBackend

    b = LlamaCppBackend(bundled_path, n_ctx=2048)
    yield b
    b.close()


@pytest.fixture(scope="module")
def engine(bundled_path):
    """A real engine on the bundled model; module-scoped because loading costs ~0.5 s."""
    from engine.engine import Engine
    from engine.config import EngineConfig

    e = Engine.open(EngineConfig(bundled_path, n_ctx=2048, n_threads=2))
    yield e
    e.close()


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HEARTH_DATA_DIR", str(tmp_path))
    return tmp_path


@pytest.fixture
def make_window(qtbot, data_dir):
    """make_window(start=True, write=True, **sampling) -> a shown MainWindow (model loaded if start);
    write=False keeps the settings file the test saved."""
    from app.window.main_window import MainWindow
    from app.window.selftest import write_settings

    made: list[MainWindow] = []

    def make(start: bool = True, write: bool = True, **sampling) -> MainWindow:
        if write:
            write_settings(**{"max_tokens": 24, **sampling})
        w = MainWindow()
        made.append(w)
        w.show()
        if start:
            w.start()
            qtbot.waitUntil(lambda: w.host.ready or not w.host.loading, timeout=60_000)
            assert w.host.ready, w.info.messages()
        return w

    yield make
    for w in made:
        w.close()


@pytest.fixture(scope="session")
def tiny_vlm(bundled_path):
    """(model GGUF, projector GGUF): SmolLM2 with a random-weight vision tower, converted by
    llama.cpp's own convert_hf_to_gguf.py (tests/vlm_model.py; built once, cached, ~1 min)."""
    from vlm_model import build

    return build(bundled_path)


@pytest.fixture(scope="session")
def tiny_qwen2vl(bundled_path):
    """(model GGUF, projector GGUF): a tiny random Qwen2-VL, whose images take fewer positions than
    tokens (M-RoPE), converted by llama.cpp's own converter (tests/vlm_model.py; cached)."""
    from vlm_model import build_mrope

    return build_mrope(bundled_path)


@pytest.fixture(scope="session")
def sound():
    """The session's sound server: ``say(wav)`` into the microphone, ``listen()`` to the speaker."""
    assert not SOUND.missing, "pulseaudio is not installed: scripts/test.sh installs it (pulseaudio pulseaudio-utils)"
    return SOUND


@pytest.fixture
def speech_hub(monkeypatch, tmp_path):
    """A local Hub serving the bundled speech models' files as repositories (tests/hub_server.py), with
    the Hugging Face cache and Hearth's models folder in the test's own folder."""
    from engine.voice.models import piper_voice, whisper_model
    from hub_server import HubServer

    whisper = whisper_model()  # the bundled one's files, served as if they were a Hub repository
    voice = piper_voice()
    repos = {
        "acme/faster-whisper-tiny.en": {f.name: f.read_bytes() for f in whisper.path.iterdir() if f.is_file()},
        "acme/piper-voices": {"en/en_US/joe/medium/" + voice.path.name: voice.path.read_bytes(),
                              "en/en_US/joe/medium/" + voice.path.name + ".json":
                                  (voice.path.parent / (voice.path.name + ".json")).read_bytes(),
                              "README.md": b"voices"},
        "acme/not-speech": {"config.json": b"{}", "model.safetensors": b"\0" * 64},
    }
    srv = HubServer(repos)
    monkeypatch.setenv("HF_ENDPOINT", srv.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    monkeypatch.setenv("HEARTH_MODEL_DIR", str(tmp_path / "models"))  # Hearth's models folder: empty
    yield srv
    srv.close()
