"""The window with other machines: Settings → Machines (a real sshd on a loopback port for user@host), the
plan preview's split, a model on a loopback worker in its own process, and a worker killed mid-reply."""
from __future__ import annotations

import sys

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from app.core.settings import Settings, SettingsFile
from engine.workers.machines import WorkerMachine
from rpc_workers import sshd, start_worker


def test_a_machine_added_in_settings_is_checked_over_ssh_and_takes_layers_in_the_plan(qtbot, data_dir, tmp_path):
    from app.settings_ui.settings_dialog import SettingsDialog

    dlg = SettingsDialog(Settings())
    qtbot.addWidget(dlg)
    with sshd(tmp_path / "ssh") as (addr, key):
        tab = dlg.machines_tab
        tab.add(WorkerMachine(addr, name="laptop", identity=str(key),
                              command=f"env HEARTH_DATA_DIR={tmp_path} {sys.executable} -m engine worker --threads 1"))
        item = tab.table.topLevelItem(0)
        qtbot.waitUntil(lambda: item.text(2).startswith("reached in"), timeout=60_000)
        assert "device" in item.text(2) and "free" in item.text(2) and item.text(0) == "laptop"
    assert tab.values() == {"workers": (addr,)}
    # The preview plans the split as the load will: the machine's device (as its check found it) takes layers.
    qtbot.waitUntil(lambda: "worker laptop:" in dlg.memory.text(), timeout=30_000)  # by the machine's name
    assert "layers" in dlg.memory.text().split("worker laptop:")[1].split(";")[0]
    assert dlg.build().workers == (addr,)
    item.setCheckState(0, Qt.CheckState.Unchecked)  # not for this model: the plan is this machine's alone
    qtbot.waitUntil(lambda: dlg.memory.text() and "worker" not in dlg.memory.text(), timeout=30_000)
    tab.remove(addr)
    assert tab.table.topLevelItemCount() == 0 and tab.store.all() == []


def test_a_worker_killed_mid_reply_leaves_the_window_the_message_and_an_offer_to_reload_without_it(
        qtbot, make_window, tmp_path):
    endpoint, proc = start_worker(tmp_path, "worker")
    try:
        s = Settings(workers=(endpoint,), exactness="exact")
        s.sampling.update({"temperature": 0.0, "seed": 0, "max_tokens": 300})
        SettingsFile().save(s)
        w = make_window(write=False)
        m = w.host.model
        assert m.runtime == "rpc" and endpoint in m.device and any("process of its own" in n for n in m.notes)
        text = "Write a very long story about a dragon who learns to bake bread."
        w.chat.input.setPlainText(text)
        QTest.keyClick(w.chat.input, Qt.Key.Key_Return)
        mid = w.stream.mid
        qtbot.waitUntil(lambda: bool(w.stream is not None and len("".join(w.stream.parts)) > 20), timeout=60_000)
        proc.kill()  # kill -9 the worker mid-reply
        qtbot.waitUntil(lambda: w.stream is None, timeout=60_000)
        msgs = w.store.messages(w.current)
        assert msgs[0].role == "user" and msgs[0].content == text  # the message stays
        stored = w.store.message(mid)
        assert stored.content and not stored.complete  # and what came of the reply
        offers = [b for b in w.info.bars() if getattr(b, "action_button", None) is not None
                  and b.action_button.text() == f"Reload without {endpoint}"]
        assert len(offers) == 1 and endpoint in offers[0].text(), w.info.messages()
        # One event, one bar: the offer says what happened to the reply, so no second bar says it again.
        assert [m for m in w.info.messages() if "stopped answering" in m or "stopped with an error" in m] == \
            [offers[0].text()]
        offer = offers[0]
        offer.action_button.click()
        qtbot.waitUntil(lambda: w.host.ready and w.host.model is not None and w.host.model.runtime != "rpc",
                        timeout=60_000)
        assert w.settings.workers == () and SettingsFile().load()[0].workers == ()
        # The model runs here now: nothing still says it has layers elsewhere or that a machine is lost.
        assert not [m for m in w.info.messages() if endpoint in m or "other machines" in m], w.info.messages()
    finally:
        proc.kill()
        proc.wait(10)
