"""The Server panel in the real window (offscreen): the local server on the bundled model, real API requests
with a device key and the settings key, and a window reply; the panel draws what the server counted."""
from __future__ import annotations

import socket

import openai
import pytest


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HEARTH_DATA_DIR", str(tmp_path))
    return tmp_path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_server_panel_shows_requests_latency_queue_kv_and_keys(qtbot, data_dir):
    from dataclasses import replace

    from engine.serve.http.other_devices import key_ring

    from app.performance.server_panel import summary_text
    from app.settings_ui.settings_dialog import SettingsDialog
    from app.window.main_window import MainWindow
    from app.window.selftest import send_and_wait, write_settings

    entry, device_key = key_ring(data_dir).create("laptop")
    write_settings(max_tokens=16)
    w = MainWindow()
    try:
        w.show()
        w.start()
        qtbot.waitUntil(lambda: w.host.ready, timeout=60_000)
        w.performance.act_server.trigger()  # before the server runs: it says how to turn it on
        panel = w.performance.server_panel
        assert panel is not None and panel.isVisible()
        assert "Settings → Local server" in panel.status.text() and panel.view.requests == 0

        dlg = SettingsDialog(w.settings, w)
        dlg.server_tab.enabled.setChecked(True)
        port = free_port()
        dlg.server_tab.port.setValue(port)
        settings_key = dlg.server_tab.key.text()
        w.apply_settings(dlg.build())
        dlg.deleteLater()
        qtbot.waitUntil(lambda: w.server_host.server.model_id is not None, timeout=30_000)
        srv = w.server_host.server
        url = f"http://127.0.0.1:{port}/v1"
        for key, prompts in ((device_key, ("Name a fruit.", "Name a tree.")), (settings_key, ("Name a bird.",))):
            client = openai.OpenAI(base_url=url, api_key=key, max_retries=0, timeout=120)
            for p in prompts:
                r = client.chat.completions.create(model=srv.model_id, max_tokens=8, temperature=0,
                                                   messages=[{"role": "user", "content": p}])
                assert r.choices[0].message.content
        reply = send_and_wait(w, "Say hello.")  # the window's own reply, in the same engine core
        assert reply["text"] and not reply["error"]
        qtbot.waitUntil(lambda: srv.in_flight == 0, timeout=30_000)

        panel.refresh()
        v = panel.view
        assert v.requests == 4 and v.priorities == {"interactive": 3, "window": 1}
        assert f"on at {srv.url}" in panel.status.text()
        assert panel.summary.text().startswith("Last 5 min: 4 requests (")
        assert panel.summary.text() == summary_text(v) and v.ttft_p50_s is not None and v.tpot_p99_s is not None
        rows = [[panel.keys.item(r, c).text() for c in range(3)] for r in range(panel.keys.rowCount())]
        assert rows[0][:2] == [f"laptop · {entry.id}", "2"] and rows[1][:2] == ["settings key", "1"]
        assert sum(p.y() for p in panel.series["requests"]["requests"].points()) == 4
        assert panel.series["ttft"]["p50"].count() >= 1 and panel.series["tpot"]["p99"].count() >= 1
        # The server samples its queue and KV once a second while it runs: the history grows.
        before = len(v.samples)
        qtbot.waitUntil(lambda: (panel.refresh(), len(panel.view.samples) > before)[1], timeout=10_000)
        assert panel.series["queue"]["waiting"].count() == len(panel.view.samples)
        assert panel.view.latest.running == panel.view.latest.waiting == 0
        kv = [p.y() for p in panel.series["kv"]["used"].points()]
        assert kv and all(0 <= y <= 100 for y in kv) and kv[-1] > 0  # the slots hold their last prompts
        img = panel.grab().toImage()
        step = max(1, img.width() // 100)
        assert len({img.pixel(x, y) for x in range(0, img.width(), step) for y in range(0, img.height(), step)}) > 8

        # Off: the panel says so and keeps the figures of the run that ended.
        w.apply_settings(replace(w.settings, server_enabled=False))
        panel.refresh()
        assert "is off" in panel.status.text() and panel.view.requests == 4
    finally:
        w.close()
