"""The window on a model another Hearth serves: added in the Models dock, streamed, stopped, and its faults.

The server is a real ``python -m engine serve`` in its own process (a second
machine as far as the window can tell); faults come from tests/fault_proxy.py in
front of it. The window itself starts on its bundled model, as a user's does.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from engine.loading import remote_model
from tests.fault_proxy import FaultProxy
from tests.serving import hearth_process

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def hearth_server(tmp_path_factory):
    """Another Hearth serving its bundled model: (url, port)."""
    with hearth_process(tmp_path_factory.mktemp("other-hearth")) as served:
        yield served


def add_server(qtbot, w, url: str) -> None:
    view = w.models_dock.library_view
    w.show_library()
    view.add_server()
    dlg = view.server_dialog
    dlg.url.setText(url)
    dlg.try_add()
    qtbot.waitUntil(lambda: dlg.result() == dlg.DialogCode.Accepted or dlg.buttons.isEnabled(), timeout=30_000)
    assert dlg.result() == dlg.DialogCode.Accepted, dlg.status.text()


def use_remote(qtbot, w, url: str) -> None:
    view = w.models_dock.library_view
    qtbot.waitUntil(lambda: view.table.rowCount() > len(view.models) and bool(view.servers.rows), timeout=30_000)
    row = len(view.models)  # the first server model, below the ones on disk
    assert view.table.item(row, view.table.columnCount() - 1).text().startswith("on ")  # where it runs
    view.table.selectRow(row)
    view.load_button.click()
    qtbot.waitUntil(lambda: w.host.ready and w.host.model is not None and w.host.model.backend == "remote",
                    timeout=30_000)


def send(w, text: str) -> int:
    w.chat.input.setPlainText(text)
    QTest.keyClick(w.chat.input, Qt.Key.Key_Return)
    assert w.stream is not None, w.info.messages()
    return w.stream.mid


def test_a_server_added_in_the_dock_streams_a_reply_in_the_window(qtbot, make_window, hearth_server):
    url, port = hearth_server
    w = make_window(max_tokens=16)
    add_server(qtbot, w, url)
    view = w.models_dock.library_view
    assert any(r[0].url == url for r in view.servers.rows)
    use_remote(qtbot, w, url)
    assert "SmolLM2" in w.model_label.text() and f"127.0.0.1:{port}" in w.model_label.toolTip()
    mid = send(w, "What is the capital of France?")
    qtbot.waitUntil(lambda: w.stream is None, timeout=60_000)
    stored = w.store.message(mid)
    assert stored.content and stored.finish_reason in ("eos", "max_tokens") and stored.metrics["backend"] == "remote"
    assert stored.metrics["prompt_tokens"] > 0 and stored.metrics["ttft_ms"] > 0
    # another Hearth counts tokens with its model: the context meter is not marked as an estimate
    assert w.host.model.capabilities.exact_tokens and w.context_label.text().startswith("Context ")
    assert "≈" not in w.context_label.text() and "cannot count" not in w.context_label.toolTip()
    assert w.settings.source == "remote" and w.settings.model == remote_model(url, w.host.model.label)
    from app.settings_ui.settings_dialog import SettingsDialog

    dlg = SettingsDialog(w.settings, w)  # Settings shows the server's model as chosen, not the bundled one
    assert dlg.chosen_source() == "remote" and dlg.chosen_model() == w.settings.model
    assert "Runs on its server" in dlg.memory.text()
    dlg.close()
    w.performance.open_benchmark()  # says plainly why it cannot, rather than tune a model that is not here
    assert w.performance.tune_dialog is None and any("runs on 127.0.0.1" in m for m in w.info.messages())


def test_stop_ends_a_remote_reply_within_300_ms_and_keeps_it(qtbot, make_window, hearth_server):
    url, _port = hearth_server
    w = make_window(max_tokens=2000)
    add_server(qtbot, w, url)
    use_remote(qtbot, w, url)
    stop_within_300_ms(qtbot, w)


def stop_within_300_ms(qtbot, w) -> None:
    """Send a long request, press Stop after a few words: the reply ends within 300 ms and is kept."""
    mid = send(w, "Write a very long story about a dragon who learns to bake bread.")
    deltas: list[str] = []
    w.host.delta.connect(lambda m, t: deltas.append(t))
    qtbot.waitUntil(lambda: len(deltas) >= 5, timeout=60_000)
    t0 = time.perf_counter()
    w.chat.stop_button.click()
    qtbot.waitUntil(lambda: w.stream is None, timeout=5_000)
    assert time.perf_counter() - t0 < 0.3
    stored = w.store.message(mid)
    assert stored.finish_reason == "cancelled" and stored.content.startswith("".join(deltas))


def test_a_server_that_goes_away_mid_reply_keeps_the_message_and_the_partial_reply(qtbot, make_window,
                                                                                    hearth_server):
    _url, port = hearth_server
    with FaultProxy(("127.0.0.1", port)) as proxy:
        w = make_window(max_tokens=200)
        add_server(qtbot, w, proxy.url)
        use_remote(qtbot, w, proxy.url)
        proxy.mode, proxy.after = "cut", 1500
        text = "Write a very long story about a dragon who learns to bake bread."
        mid = send(w, text)
        qtbot.waitUntil(lambda: w.stream is None, timeout=60_000)
        msgs = w.store.messages(w.current)
        assert msgs[0].role == "user" and msgs[0].content == text
        stored = w.store.message(mid)
        assert stored.content and not stored.complete and "partial reply is kept" in (stored.error or "")
        assert any("lost in the middle of the reply" in m for m in w.info.messages())


# One refusal in the window: the text comes back whatever the status; each status's own wording (503 with its
# Retry-After, 429, 401, 500) is tests/test_remote_engine.py's, where it costs no window.
@pytest.mark.parametrize("status,said", [(503, "is unavailable (503); it asks to wait 30 s")])
def test_a_server_that_refuses_a_message_gives_the_text_back(qtbot, make_window, hearth_server, status, said):
    _url, port = hearth_server
    with FaultProxy(("127.0.0.1", port)) as proxy:
        w = make_window()
        add_server(qtbot, w, proxy.url)
        use_remote(qtbot, w, proxy.url)
        body = b'{"error": {"message": "busy"}}'
        proxy.mode, proxy.response = "status", (b"HTTP/1.1 %d X\r\nRetry-After: 30\r\nContent-Length: %d\r\n\r\n%s"
                                                 % (status, len(body), body))
        w.chat.input.setPlainText("my carefully typed question")
        QTest.keyClick(w.chat.input, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: w.stream is None, timeout=30_000)
        assert w.chat.input_text() == "my carefully typed question"  # nothing typed is lost
        assert any(said in m and "Your text is back" in m for m in w.info.messages()), w.info.messages()
        assert w.host.ready and w.host.model.backend == "remote"  # the model stays; the next try may work


def test_a_server_that_cannot_be_reached_leaves_the_model_that_worked(qtbot, make_window):
    w = make_window()
    before = w.host.model
    w.models_dock.load_remote("http://127.0.0.1:9/v1#nothing")
    qtbot.waitUntil(lambda: any("refused the connection" in m for m in w.info.messages()), timeout=30_000)
    qtbot.waitUntil(lambda: w.host.ready and w.settings.source == "bundled", timeout=30_000)
    assert w.host.model.label == before.label and w.host.model.local == before.local  # not loaded again
    mid = send(w, "Hi")
    qtbot.waitUntil(lambda: w.stream is None, timeout=60_000)
    assert w.store.message(mid).metrics["backend"] != "remote"


def test_letting_other_devices_in_serves_over_tls_with_a_key_made_in_settings(qtbot, make_window, tmp_path):
    from engine import Message, SamplingParams
    from engine.remote.connect import open_remote
    from engine.remote.errors import RemoteError
    from engine.remote.pins import PinStore

    from app.settings_ui.settings_dialog import SettingsDialog
    from test_app_server import free_port

    w = make_window()
    dlg = SettingsDialog(w.settings, w)
    tab = dlg.server_tab
    tab.enabled.setChecked(True)
    tab.port.setValue(port := free_port())
    assert not tab.listen_addr.isEnabled()
    tab.listen.setChecked(True)
    tab.listen_addr.setText("127.0.0.2")  # beyond 127.0.0.1, still on this machine
    assert tab.listen_addr.isEnabled() and f"https://127.0.0.2:{port}/v1" in tab.example.text()
    tab.make_key.click()
    tab.make_key.click()
    tab.device_keys.setCurrentRow(1)
    tab.revoke_key.click()  # the second key: gone, and its text with it
    assert tab.new_key.text() == "" and tab.device_keys.count() == 1
    tab.make_key.click()
    key = tab.new_key.text()
    assert key.startswith("hearth-") and tab.device_keys.count() == 2 and key not in tab.device_keys.item(1).text()
    w.apply_settings(dlg.build())
    dlg.deleteLater()
    assert w.server_host.running, w.info.messages()
    qtbot.waitUntil(lambda: w.server_host.server.model_id is not None, timeout=30_000)
    label = w.server_host.label.text()
    assert label.startswith(f"API 127.0.0.2:{port} (other devices can connect)")
    url = w.server_host.server.url
    assert url == f"https://127.0.0.2:{port}/v1"
    with pytest.raises(RemoteError) as e:
        open_remote(url, None, pins=PinStore(tmp_path / "pins.json"))
    assert e.value.status == 401
    other = open_remote(url, key, pins=PinStore(tmp_path / "pins.json"))
    final = list(other.stream([Message("user", "Hi")], SamplingParams(temperature=0.0, max_tokens=4)))[-1]
    assert final.kind == "final" and final.text


def test_bench_stream_on_a_server_model_compares_the_window_with_the_openai_client(hearth_server, tmp_path):
    """``python -m app --bench-stream --model URL#id`` (what ``bench remote`` runs): correctness only."""
    import json

    url, _port = hearth_server
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "HOME": str(tmp_path)}
    env.pop("HEARTH_DATA_DIR", None)  # it picks its own scratch folder
    from engine.remote.connect import list_models

    model = remote_model(url, list_models(url)[0].id)
    p = subprocess.run([sys.executable, "-m", "app", "--bench-stream", "--model", model, "--tokens", "12",
                        "--rounds", "1"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert p.returncode == 0 and r["ok"], p.stdout + p.stderr
    assert r["window_tok_s"] > 0 and r["client_tok_s"] > 0 and r["ratio"] == pytest.approx(
        r["window_tok_s"] / r["client_tok_s"], abs=1e-3)
    assert r["ttft_added_ms"] == pytest.approx(r["window_ttft_ms"] - r["client_ttft_ms"], abs=0.11)
    assert r["per_round"]["chunks"] == [12]
