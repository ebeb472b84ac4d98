"""The window's transformers model sources, with the real engine, offscreen: a local
Hugging Face folder, and Hub ids (offline with a dead endpoint, and downloaded with
progress and cancel from the local Hub server of test_hub.py). A tiny random Llama
(tests/tiny_hf.py) stands in for a real model so each load takes a second."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")
pytest.importorskip("huggingface_hub")

from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtTest import QTest  # noqa: E402

from app.window.main_window import MainWindow  # noqa: E402
from app.window.model_loading import BAR_STEPS  # noqa: E402
from app.core.settings import Settings, SettingsError, SettingsFile  # noqa: E402


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from tiny_hf import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tinyhf") / "tiny-llama")


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HEARTH_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hfcache"))   # never the user's cache
    monkeypatch.setenv("HEARTH_MODEL_DIR", str(tmp_path / "models"))  # no draft search among real models
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    return tmp_path


def greedy(**fields) -> Settings:
    s = Settings(**fields)
    s.sampling.update(temperature=0.0, seed=0, max_tokens=8)
    return s


@pytest.fixture
def window(qtbot, data_dir):
    """window(settings, worked=None) -> a shown MainWindow that has started loading ``settings``."""
    made: list[MainWindow] = []

    def make(settings: Settings, worked: Settings | None = None) -> MainWindow:
        f = SettingsFile()
        if worked is not None:
            f.mark_working(worked)
        f.save(settings)
        w = MainWindow()
        made.append(w)
        w.show()
        w.start()
        return w

    yield make
    for w in made:
        w.close()


def with_model(w: MainWindow, model: str, source: str) -> Settings:
    return Settings(**{**w.settings.to_dict(), "model": model, "source": source})


def test_dialog_offers_folders_and_hub_ids_and_refuses_what_the_engine_would(qtbot, data_dir, tiny_dir):
    from app.settings_ui.settings_dialog import SettingsDialog

    dlg = SettingsDialog(Settings())
    qtbot.addWidget(dlg)
    assert dlg.rb_hf.isEnabled() and dlg.rb_hub.isEnabled()
    assert dlg.backend_combo.currentData() == "llama_cpp" and dlg.quant_combo.isHidden()

    # A folder runs on transformers, with Auto / none / int8 / int4 and a memory plan.
    dlg.folder_edit.setText(str(tiny_dir))
    dlg.rb_hf.setChecked(True)
    assert dlg.backend_combo.currentData() == "hf" and not dlg.backend_combo.isEnabled()
    assert not dlg.quant_combo.isHidden()
    assert [dlg.quant_combo.itemData(i) for i in range(dlg.quant_combo.count())] == ["auto", "none", "int8", "int4"]
    qtbot.waitUntil(lambda: dlg.plan is not None, timeout=30_000)
    assert dlg.plan.spec.format == "hf" and "KV cache" in dlg.plan_view.toPlainText()
    dlg.quant_combo.setCurrentIndex(dlg.quant_combo.findData("int8"))
    s = dlg.build()
    assert (s.model, s.source, s.backend, s.quant, s.effective_backend) == \
        (str(tiny_dir), "hf_dir", "auto", "int8", "hf")

    # Folders the engine refuses are refused here, with its reason.
    pickled = data_dir / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text('{"model_type": "llama"}')
    (pickled / "pytorch_model.bin").write_bytes(b"\x80\x04")
    remote = data_dir / "remote"
    remote.mkdir()
    (remote / "config.json").write_text(json.dumps(
        {"model_type": "hearth_custom", "auto_map": {"AutoModelForCausalLM": "modeling_x.XForCausalLM"}}))
    (remote / "model.safetensors").write_bytes(b"")
    for folder, why in ((pickled, "only pickled PyTorch weights"), (remote, "needs its own Python code"),
                        (data_dir / "missing", "not found"), (data_dir, "no config.json")):
        dlg.folder_edit.setText(str(folder))
        dlg.refresh_model()
        assert why in dlg.memory.text()
        with pytest.raises(SettingsError, match=why):
            dlg.build()

    # A Hub id: transformers for a repository, llama.cpp for one GGUF file of it.
    dlg.hub_edit.setText("owner/repo")
    dlg.rb_hub.setChecked(True)
    assert dlg.backend_combo.currentData() == "hf" and not dlg.backend_combo.isEnabled()
    s = dlg.build()
    assert (s.model, s.source, s.effective_backend, s.quant) == ("owner/repo", "hub", "hf", "int8")
    dlg.hub_edit.setText("owner/repo-GGUF:Q4_K_M")
    dlg.refresh_model()
    assert dlg.backend_combo.currentData() == "llama_cpp" and dlg.quant_combo.isHidden()
    s = dlg.build()
    assert (s.effective_backend, s.quant) == ("llama_cpp", "auto")
    dlg.hub_edit.setText("not a hub id")
    dlg.refresh_model()
    with pytest.raises(SettingsError, match="not a Hub id"):
        dlg.build()

    # A GGUF file may run on transformers instead; the choice is remembered per GGUF.
    dlg.rb_bundled.setChecked(True)
    dlg.backend_combo.setCurrentIndex(dlg.backend_combo.findData("hf"))
    assert not dlg.quant_combo.isHidden() and "dequantize" in dlg.backend_label.text()
    s = dlg.build()
    assert (s.model, s.backend, s.effective_backend) == ("bundled", "hf", "hf")


def test_settings_files_without_the_new_fields_still_load(tmp_path):
    path = tmp_path / "settings.json"
    old = {k: v for k, v in Settings(model="/models/x.gguf", context=2048).to_dict().items()
           if k not in ("source", "backend", "quant")}
    path.write_text(json.dumps({**old, "last_working": {"model": "bundled", "context": 1024, "draft": "auto",
                                                         "n_threads": None}}))
    f = SettingsFile(path)
    s, notice = f.load()
    assert notice is None and (s.source, s.backend, s.quant) == ("gguf", "auto", "auto")
    hub = Settings(**{**s.to_dict(), "model": "hearth/tiny", "source": "hub", "quant": "int4"})
    back = f.rolled_back(hub)  # an old rollback target is complete: its missing fields are the defaults
    assert (back.model, back.source, back.quant, back.context) == ("bundled", "bundled", "auto", 1024)
    for bad, field in (({"source": "hub", "model": "/not/an/id"}, "model"), ({"source": "cloud"}, "source"),
                       ({"backend": "llama_cpp", "model": "o/r", "source": "hub"}, "backend"),
                       ({"quant": "int3"}, "quant"), ({"quant": "int8"}, "quant")):
        with pytest.raises(SettingsError, match=f"^{field}"):
            Settings.from_dict({**Settings().to_dict(), **bad})


def test_an_hf_folder_loads_on_transformers_and_a_reply_streams(qtbot, window, tiny_dir):
    w = window(greedy(model=str(tiny_dir)))  # quantization Auto: the sizing plan picks (none here)
    qtbot.waitUntil(lambda: not w.host.loading, timeout=60_000)
    assert w.host.ready, w.info.messages()
    m = w.host.model
    assert (m.backend, m.label, m.quant) == ("hf", "tiny-llama", "float32")
    assert w.model_label.text().startswith("tiny-llama · float32 · context")
    deltas: list[str] = []
    w.host.delta.connect(lambda _mid, text: deltas.append(text))
    w.chat.input.setPlainText("Hello there")
    QTest.keyClick(w.chat.input, Qt.Key.Key_Return)
    assert w.stream is not None
    qtbot.waitUntil(lambda: w.stream is None, timeout=60_000)
    user, reply = w.store.messages(w.current)
    assert user.content == "Hello there" and reply.role == "assistant"
    assert deltas and reply.content == "".join(deltas) and reply.metrics["backend"] == "hf"


def test_a_hub_id_without_network_fails_clearly_and_rolls_back(qtbot, window, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there: no network
    w = window(greedy())
    qtbot.waitUntil(lambda: w.host.ready, timeout=60_000)
    w.apply_settings(with_model(w, "hearth/never-downloaded", "hub"))
    assert w.host.loading and "hearth/never-downloaded" in w.model_label.text()
    w.chat.input.setPlainText("text I typed while it loads")
    QTest.keyClick(w.chat.input, Qt.Key.Key_Return)  # refused while loading; the text stays
    qtbot.waitUntil(lambda: w.host.ready, timeout=60_000)
    msgs = " ".join(w.info.messages())
    assert "Could not load hearth/never-downloaded: cannot reach http://127.0.0.1:9" in msgs
    assert "not in the Hugging Face cache" in msgs and "Went back to the bundled model" in msgs
    assert w.host.model.bundled and w.settings.model == "bundled"
    assert SettingsFile().load()[0].model == "bundled"
    assert w.chat.input_text() == "text I typed while it loads"


@pytest.fixture
def fake_hub(tiny_dir, monkeypatch, data_dir):
    from test_hub import FakeHub  # the local server that speaks the Hub's protocol

    files = {p.name: p.read_bytes() for p in tiny_dir.iterdir() if p.is_file()}
    srv = FakeHub({"hearth/tiny": files})
    monkeypatch.setenv("HF_ENDPOINT", srv.url)
    yield srv
    srv.close()


def test_a_hub_download_shows_progress_can_be_cancelled_and_resumes(qtbot, window, fake_hub):
    fake_hub.throttle = 0.01  # 4 KiB per 10 ms: the weights take over a second
    w = window(greedy(model="hearth/tiny", source="hub"), worked=greedy())
    seen: list[tuple[int, int, str]] = []
    bar: list[tuple[int, int, str]] = []

    def on_progress(done, total, name):
        seen.append((done, total, name))
        if name == "model.safetensors" and done > min(d for d, _t, n in seen if n == name):
            bar.append((w.load_bar.maximum(), w.load_bar.value(), w.model_label.text()))
            if len(bar) == 1:
                w.cancel_load_button.click()  # part of the weights file has arrived: cancel, once

    w.host.download_progress.connect(on_progress)
    qtbot.waitUntil(lambda: w.host.ready, timeout=60_000)  # cancelled, then back on the bundled model
    assert bar and bar[0][0] == BAR_STEPS and 0 < bar[0][1] < BAR_STEPS
    assert bar[0][2].startswith("Downloading hearth/tiny: ") and " of " in bar[0][2]
    assert all(d <= t for d, t, _n in seen)
    msgs = " ".join(w.info.messages())
    assert "Downloading hearth/tiny was cancelled" in msgs and "Went back to the bundled model" in msgs
    assert w.host.model.bundled and not w.load_bar.isVisible()

    fake_hub.throttle = 0.0
    seen.clear()
    bar.append((0, 0, "resuming"))  # no second cancel
    w.apply_settings(with_model(w, "hearth/tiny", "hub"))
    qtbot.waitUntil(lambda: not w.host.loading, timeout=60_000)
    assert w.host.ready, w.info.messages()
    assert (w.host.model.backend, w.host.model.label) == ("hf", "hearth/tiny"), w.info.messages()
    assert fake_hub.gets("model.safetensors")[-1].startswith("bytes=")  # resumed, not started over
    assert seen[-1][0] == seen[-1][1] > 0 and seen[-1][2] == ""  # the download completed
