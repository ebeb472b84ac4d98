"""The local server in the app: its settings, Settings → Local server, the status bar,
and API clients beside the window's own reply (pytest-qt, the real bundled model)."""
from __future__ import annotations

import json

import pytest

from app.core.settings import Settings, SettingsError, SettingsFile
from serving import assert_other_protocols


def test_server_settings_default_off_validate_and_round_trip(tmp_path):
    s = Settings()
    assert (s.server_enabled, s.server_port, s.server_api_key, s.server_cors) == (False, 8765, "", [])
    for bad, field in ((dict(server_port=80), "server_port"), (dict(server_port="8765"), "server_port"),
                       (dict(server_enabled="yes"), "server_enabled"), (dict(server_api_key="a b"), "server_api_key"),
                       (dict(server_cors=["evil.example"]), "server_cors"),
                       (dict(server_max_queue_wait=-1), "server_max_queue_wait"),
                       (dict(server_max_queue_wait=1.5), "server_max_queue_wait"),
                       (dict(server_max_queue_wait=True), "server_max_queue_wait"),
                       (dict(server_max_queue_wait=10_000), "server_max_queue_wait")):
        with pytest.raises(SettingsError, match=field):
            Settings(**bad).validate()
    f = SettingsFile(tmp_path / "settings.json")
    assert s.server_max_queue_wait == 120  # as `engine serve --max-queue-wait`
    mine = Settings(server_enabled=True, server_port=9123, server_api_key="abc-DEF_123",
                    server_cors=["http://localhost:3000"], server_max_queue_wait=0)
    f.save(mine)
    assert f.load() == (mine, None)
    # A bad server field goes back to its default; the rest are kept.
    raw = json.loads(f.path.read_text())
    raw["server_port"] = 99999
    raw["server_max_queue_wait"] = "soon"
    f.path.write_text(json.dumps(raw))
    loaded, msg = f.load()
    assert loaded.server_port == 8765 and loaded.server_enabled and loaded.server_api_key == "abc-DEF_123"
    assert loaded.server_max_queue_wait == 120
    assert "server_port" in msg and "server_max_queue_wait" in msg


def test_settings_dialog_local_server_tab(qtbot):
    from PySide6.QtGui import QGuiApplication

    from app.settings_ui.settings_dialog import SettingsDialog

    dlg = SettingsDialog(Settings())
    qtbot.addWidget(dlg)
    tab = dlg.server_tab
    assert not tab.enabled.isChecked() and not tab.port.isEnabled()  # off by default
    assert dlg.build().server_enabled is False
    tab.enabled.setChecked(True)
    tab.port.setValue(9345)
    first = tab.key.text()
    assert len(first) >= 40 and tab.require_key.isChecked()  # a first set-up starts with a generated key
    tab.regenerate.click()
    assert tab.key.text() != first
    tab.copy_key.click()
    assert QGuiApplication.clipboard().text() == tab.key.text()
    assert "127.0.0.1:9345/v1" in tab.example.text() and tab.key.text() in tab.example.text()
    tab.cors.setPlainText("http://localhost:3000/\n\n")
    s = dlg.build()
    assert (s.server_enabled, s.server_port, s.server_api_key, s.server_cors) == (
        True, 9345, tab.key.text(), ["http://localhost:3000"])
    tab.require_key.setChecked(False)
    assert dlg.build().server_api_key == "" and not tab.key.isEnabled()
    assert tab.max_wait.value() == 120 and tab.max_wait.isEnabled()
    tab.max_wait.setValue(0)
    assert dlg.build().server_max_queue_wait == 0 and tab.max_wait.text() == "No limit"
    tab.cors.setPlainText("not an origin")
    with pytest.raises(SettingsError, match="server_cors"):
        dlg.build()
    # Settings saved with a key show that key again, checked.
    again = SettingsDialog(Settings(server_enabled=True, server_api_key="k-123", server_max_queue_wait=45))
    qtbot.addWidget(again)
    assert again.server_tab.key.text() == "k-123" and again.server_tab.require_key.isChecked()
    assert again.server_tab.max_wait.value() == 45


def test_each_device_key_has_a_priority_set_in_the_server_tab(qtbot, data_dir):
    from engine.serve.http.other_devices import key_ring

    from app.settings_ui.settings_dialog import SettingsDialog

    dlg = SettingsDialog(Settings(server_enabled=True, server_listen="0.0.0.0"))
    qtbot.addWidget(dlg)
    tab = dlg.server_tab
    assert tab.key_priority.isEnabled() and tab.key_priority.currentData() == "interactive"
    tab.make_key.click()  # interactive, the default
    tab.key_priority.setCurrentIndex(tab.key_priority.findData("background"))
    tab.key_priority.activated.emit(tab.key_priority.currentIndex())  # as a user's pick sends it
    # The new key was picked in the list, so the pick gave it the class; a key made now gets it too.
    tab.make_key.click()
    ring = key_ring(data_dir)
    assert [e.priority for e in ring.entries()] == ["background", "background"]
    assert "background" in tab.device_keys.item(0).text() and tab.device_keys.currentRow() == 1
    tab.device_keys.setCurrentRow(0)
    tab.key_priority.setCurrentIndex(tab.key_priority.findData("interactive"))
    tab.key_priority.activated.emit(tab.key_priority.currentIndex())
    assert [e.priority for e in ring.entries()] == ["interactive", "background"]
    assert "interactive" in tab.device_keys.item(0).text() and tab.device_keys.currentRow() == 0
    tab.device_keys.setCurrentRow(1)  # picking a key shows its class
    assert tab.key_priority.currentData() == "background"
    tab.listen.setChecked(False)
    assert not tab.key_priority.isEnabled()


# -- the server in the running window --------------------------------------------------

API_PROMPTS = ("API question: name a fruit.", "API question: name a tree.")


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HEARTH_DATA_DIR", str(tmp_path))
    return tmp_path


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_local_server_in_the_window(qtbot, data_dir, monkeypatch, bundled_path):
    import os
    import threading
    from dataclasses import replace

    import httpx
    import openai
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest

    from app.bridge import load_runner as runner
    from app.window.main_window import MainWindow
    from app.window.selftest import write_settings
    from app.settings_ui.settings_dialog import SettingsDialog

    models = data_dir / "models"
    models.mkdir()
    os.link(bundled_path, models / "other.gguf")  # another library model (the same weights, another name)
    monkeypatch.setenv("HEARTH_MODEL_DIR", str(models))
    write_settings(max_tokens=24)
    w = MainWindow()
    try:
        w.show()
        w.start()
        qtbot.waitUntil(lambda: w.host.ready, timeout=60_000)
        assert not w.server_host.running and w.server_host.label.isHidden()  # off by default
        assert w.host.shared.serving is None

        # Settings → Local server: turn it on.
        dlg = SettingsDialog(w.settings, w)
        dlg.server_tab.enabled.setChecked(True)
        port = free_port()
        dlg.server_tab.port.setValue(port)
        key = dlg.server_tab.key.text()
        w.apply_settings(dlg.build())
        dlg.deleteLater()
        assert w.server_host.running and SettingsFile().load()[0].server_enabled
        qtbot.waitUntil(lambda: w.server_host.server.model_id is not None, timeout=30_000)
        assert w.server_host.label.text().startswith(f"API :{port}") and w.server_host.label.isVisible()
        url = f"http://127.0.0.1:{port}/v1"
        assert httpx.get(f"{url}/models").status_code == 401  # the generated key is required
        client = openai.OpenAI(base_url=url, api_key=key, max_retries=0, timeout=120)
        mid = client.models.list().data[0].id
        # Bad requests get a clear 4xx; the server and the window go on (below).
        for bad, status in ((b"{nope", 400), (b"x" * (40 << 20), 413)):
            r = httpx.post(f"{url}/chat/completions", content=bad, headers={"Authorization": f"Bearer {key}"},
                           timeout=60)
            assert r.status_code == status and r.json()["error"]["message"]
        with pytest.raises(openai.BadRequestError, match="context"):
            client.chat.completions.create(model=mid, max_tokens=4,
                                           messages=[{"role": "user", "content": "word " * 20000}])

        # Two API clients while the window streams its own reply.
        w.chat.input.setPlainText("Write a short poem about the sea.")
        QTest.keyClick(w.chat.input, Qt.Key.Key_Return)
        assert w.stream is not None
        answers: dict[str, str] = {}

        def ask(prompt: str) -> None:
            r = client.chat.completions.create(model=mid, messages=[{"role": "user", "content": prompt}],
                                               max_tokens=8, temperature=0)
            answers[prompt] = r.choices[0].message.content

        threads = [threading.Thread(target=ask, args=(p,)) for p in API_PROMPTS]
        for t in threads:
            t.start()
        qtbot.waitUntil(lambda: w.stream is None and not any(t.is_alive() for t in threads), timeout=120_000)
        assert set(answers) == set(API_PROMPTS) and all(answers.values())
        msgs = w.store.messages(w.current)
        assert [m.role for m in msgs] == ["user", "assistant"]
        # The window's reply ran to its end (max_tokens 24 counts as cut short, not as an error) and was saved.
        assert msgs[1].content and msgs[1].error is None and msgs[1].finish_reason in ("eos", "max_tokens")
        # API traffic never enters the history.
        everything = [m.content for c in w.store.list_conversations() for m in w.store.messages(c.id)]
        assert not any(p in text or a in text for text in everything for p, a in answers.items() if a.strip())
        assert len(w.store.list_conversations()) == 1
        w.server_host.refresh()
        assert "2 served" in w.server_host.label.text()
        # The longest queue wait: the settings', changed without a restart.
        srv = w.server_host.server
        assert srv.max_queue_wait == 120
        w.apply_settings(replace(w.settings, server_max_queue_wait=30))
        assert w.server_host.server is srv and srv.max_queue_wait == 30

        # A library model the window has not loaded: loaded for the request, shown in the status bar.
        assert {m.id: m.model_extra["loaded"] for m in client.models.list().data} == {mid: True, "other": False}
        raw = client.chat.completions.with_raw_response.create(
            model="other", messages=[{"role": "user", "content": "hi"}], max_tokens=4, temperature=0)
        assert raw.parse().model == "other" and int(raw.headers["x-hearth-load-ms"]) > 0
        w.server_host.refresh()
        assert w.server_host.label.text().endswith(" · +1 model")
        tip = w.server_host.label.toolTip()
        assert f"It serves {mid} (this window's model)" in tip
        assert "• other: loaded by a request, idle 0 of 10 min" in tip

        # Anthropic's and the Responses clients against the app's server, streamed and not; usage
        # carries what the prefix cache read.
        assert_other_protocols(f"http://127.0.0.1:{port}", key, mid)

        # The window's reply and the API's requests ran in the same engine core, in one KV pool: the window's
        # sequence and the server's parallel ones.
        eng = w.host.shared.engine
        assert eng.n_seq == 1 + w.host.shared.serving.parallel and eng.load()["served"] >= 3
        # A model switch: 503 with the reason while it loads, then the new engine is served.
        old = w.host.shared.serving.scheduler
        gate = threading.Event()
        real_load = runner.load_model
        monkeypatch.setattr(runner, "load_model", lambda *a, **k: (gate.wait(60), real_load(*a, **k))[1])
        w.load_model(w.settings.load_spec())
        qtbot.waitUntil(lambda: w.server_host.server.model_id is None, timeout=30_000)
        r = httpx.post(f"{url}/chat/completions", headers={"Authorization": f"Bearer {key}"},
                       json={"model": mid, "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 503 and "a model is loading" in r.json()["error"]["message"]
        gate.set()
        qtbot.waitUntil(lambda: w.host.ready, timeout=60_000)
        qtbot.waitUntil(lambda: w.server_host.server.model_id is not None, timeout=30_000)
        assert w.host.shared.serving.scheduler is not old
        ask(API_PROMPTS[0])

        # Turning it off stops it; the window still replies straight from the engine.
        w.apply_settings(replace(w.settings, server_enabled=False))
        assert not w.server_host.running and w.server_host.label.isHidden()
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{url}/models")
        qtbot.waitUntil(lambda: w.host.shared.serving is None, timeout=30_000)
        w.chat.input.setPlainText("And one about the sky.")
        QTest.keyClick(w.chat.input, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: w.stream is None, timeout=60_000)
        last = w.store.messages(w.current)[-1]
        assert last.role == "assistant" and last.content and last.finish_reason in ("eos", "max_tokens")
    finally:
        w.close()
    assert not w.server_host.running


def test_a_port_in_use_is_reported_and_nothing_is_lost(qtbot, data_dir):
    import socket
    from dataclasses import replace

    from app.window.main_window import MainWindow
    from app.window.selftest import write_settings

    write_settings()
    w = MainWindow()
    try:
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            w.settings = replace(w.settings, server_enabled=True, server_port=busy.getsockname()[1])
            w._apply_server()
        assert not w.server_host.running and w.server_host.label.isHidden()
        assert any("local server did not start" in m and "choose another port" in m for m in w.info.messages())
    finally:
        w.close()
