"""The Hub browser in the real window against the local Hub (tests/hub_server.py): search,
a repository's files with fit badges before downloading, a queued download paused and
resumed (from the bytes on disk), one cancelled (its partial file deleted), the model
appearing in the library, and offline saying so while the library still works."""
from __future__ import annotations

import pytest

from app.library.downloads import CANCELLED, DONE, PAUSED, RUNNING
from app.window.main_window import MainWindow
from app.window.selftest import write_settings
from engine.library import local as lib
from engine.sizing.hardware import simulated
from hub_server import HubServer, Sparse
from model_files import gguf_bytes_header, write_model_gguf

HW8 = simulated("8GiB", "16GiB", cores=8)


def small_gguf(tmp_path) -> bytes:
    """A real, complete GGUF of a few hundred KiB (a small tensor table, its data present)."""
    from gguf_writer import write_gguf

    meta = {"general.architecture": "llama", "general.name": "tiny-chat", "general.file_type": 0,
            "llama.block_count": 1, "llama.embedding_length": 64, "llama.attention.head_count": 4,
            "llama.context_length": 512, "llama.feed_forward_length": 128, "tokenizer.ggml.model": "gpt2",
            "tokenizer.ggml.tokens": [f"t{i}" for i in range(1000)]}
    p = write_gguf(tmp_path / "tiny.gguf", meta, [("token_embd.weight", (64, 1000), 0),
                                                   ("blk.0.attn_q.weight", (64, 64), 0)])
    return p.read_bytes()


@pytest.fixture
def hub(tmp_path, monkeypatch):
    head, size = gguf_bytes_header("qwen2.5-14b", "q14", "Q4_K_M")
    repos = {"acme/Tiny-GGUF": {"tiny-chat.F32.gguf": small_gguf(tmp_path),
                                "tiny-chat.Q2.gguf": small_gguf(tmp_path)[:-7] + b"x" * 7},
             "acme/Big-GGUF": {"big.Q4_K_M.gguf": Sparse(head, size)}}
    srv = HubServer(repos, {"acme/Tiny-GGUF": {"tags": ["gguf"], "downloads": 10},
                            "acme/Big-GGUF": {"tags": ["gguf"], "downloads": 5}})
    monkeypatch.setenv("HF_ENDPOINT", srv.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HEARTH_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HEARTH_MODEL_DIR", str(tmp_path / "models"))
    yield srv
    srv.close()


@pytest.fixture
def window(qtbot, hub):
    write_settings(max_tokens=8)
    w = MainWindow()
    w.show()
    w.models_dock.library_view.hardware = HW8
    w.models_dock.hub.hardware = HW8
    yield w
    w.close()


def idle(qtbot, b) -> None:
    qtbot.waitUntil(lambda: b.busy == 0, timeout=60_000)


def test_search_files_with_badges_then_download_pause_resume_and_cancel(qtbot, window, hub, tmp_path):
    dock = window.models_dock
    b = dock.hub
    b.query.setText("gguf")
    b.search_button.click()
    idle(qtbot, b)
    assert [b.results.item(i).data(256) for i in range(b.results.count())] == ["acme/Tiny-GGUF", "acme/Big-GGUF"]
    b.results.setCurrentRow(1)
    idle(qtbot, b)
    assert b.badge_of("big.Q4_K_M.gguf") == lib.FIT_OFFLOAD and b.table.item(0, 3).text() == "Q4_K_M"
    assert all(r and r.startswith("bytes=0-") for r in hub.gets("big.Q4_K_M.gguf"))  # headers only
    b.results.setCurrentRow(0)
    idle(qtbot, b)
    assert [f.name for f in b.files] == ["tiny-chat.F32.gguf", "tiny-chat.Q2.gguf"]
    assert b.badge_of("tiny-chat.F32.gguf") == lib.FIT_GPU
    assert all(b.table.columnWidth(c) >= b.table.sizeHintForColumn(c) for c in range(1, b.table.columnCount()))
    assert b.table.item(0, 4).text() == hub.etag("acme/Tiny-GGUF", "tiny-chat.F32.gguf")[0][:12]

    # Queue one, pause it part-way, resume it: the second request continues from the bytes on disk.
    hub.throttle = 0.003
    b.select_file("tiny-chat.F32.gguf")
    b.download_button.click()
    q, view = b.queue, b.downloads
    qtbot.waitUntil(lambda: q.items[0].state == RUNNING and q.items[0].done > 8192, timeout=30_000)
    view.buttons(0)["Pause"].click()
    qtbot.waitUntil(lambda: q.items[0].state == PAUSED, timeout=30_000)
    kept = q.items[0].done
    assert 0 < kept < q.items[0].total and view.item(0, 2).text() == PAUSED
    partial = list((tmp_path / "hf").rglob("*.incomplete"))
    assert len(partial) == 1
    on_disk = partial[0].stat().st_size
    assert on_disk > 0
    hub.throttle = 0.0
    view.buttons(0)["Resume"].click()
    qtbot.waitUntil(lambda: q.items[0].state == DONE, timeout=30_000)
    assert hub.gets("tiny-chat.F32.gguf")[-1] == f"bytes={on_disk}-"
    assert q.items[0].path.read_bytes() == hub.repos["acme/Tiny-GGUF"]["tiny-chat.F32.gguf"]
    # It is in the library now, with its figures and badge, selected when the library is opened
    # (a hidden library reads the disk when it is shown).
    lv = dock.library_view
    window.show_library()
    qtbot.waitUntil(lambda: lv.scanning == 0, timeout=60_000)
    assert any(m.repo_id == "acme/Tiny-GGUF" and m.origin == lib.ORIGIN_HF for m in lv.models)
    assert lv.selected() is not None and lv.selected().path == q.items[0].path
    assert any("Downloaded acme/Tiny-GGUF/tiny-chat.F32.gguf" in m for m in window.info.messages())

    # Cancel another part-way: it stops and its partial file is deleted.
    hub.throttle = 0.003
    b.select_file("tiny-chat.Q2.gguf")
    b.download_button.click()
    qtbot.waitUntil(lambda: q.items[1].state == RUNNING and q.items[1].done > 8192, timeout=30_000)
    view.buttons(1)["Cancel"].click()
    qtbot.waitUntil(lambda: q.items[1].state == CANCELLED, timeout=30_000)
    assert not list((tmp_path / "hf").rglob("*.incomplete"))
    assert not view.buttons(1)["Resume"].isEnabled()

    # Closing the window stops a transfer in flight and keeps its partial file for next time.
    q.resume(1)
    assert q.items[1].state == CANCELLED and view.item(1, 2).text() == CANCELLED  # not resumable
    i = q.add("acme/Tiny-GGUF", b.files[1])
    qtbot.waitUntil(lambda: q.items[i].state == RUNNING and q.items[i].done > 8192, timeout=30_000)
    window.close()
    qtbot.waitUntil(lambda: q.items[i].state == PAUSED, timeout=30_000)
    assert len(list((tmp_path / "hf").rglob("*.incomplete"))) == 1


def test_offline_says_so_and_the_library_still_works(qtbot, window, hub, tmp_path):
    write_model_gguf(tmp_path / "models" / "local.gguf", "qwen2.5-0.5b", "Q8_0")
    hub.down = True
    b = window.models_dock.hub
    b.query.setText("qwen")
    b.search_button.click()
    idle(qtbot, b)
    assert b.status.text().startswith("Offline:") and "still work" in b.status.text()
    window.show_library()
    lv = window.models_dock.library_view
    qtbot.waitUntil(lambda: lv.scanning == 0, timeout=60_000)
    assert "local.gguf" in {m.path.name for m in lv.models}
    qtbot.waitUntil(lambda: lv.badge_of(tmp_path / "models" / "local.gguf") == lib.FIT_GPU, timeout=60_000)


def test_a_download_that_breaks_says_why_and_the_next_one_starts(qtbot, monkeypatch):
    # Progress and the failure both come back on the GUI thread (app/bridge/background.py).
    import threading
    from pathlib import Path

    from engine.models import hub
    from engine.library.hub_search import HubFile

    from app.library.downloads import FAILED, DownloadQueue

    tmp = Path("/nowhere")  # no file is written: the transfer is a stand-in

    def broken(repo_id, *, filename, progress, cancel):
        progress(10, 100, filename)
        if filename == "bad.gguf":
            raise ValueError("the server sent a short chunk")
        return tmp / filename

    monkeypatch.setattr(hub, "download", broken)
    q = DownloadQueue()
    seen = []
    q.changed.connect(lambda i: seen.append((i, q.items[i].state, q.items[i].done, threading.get_ident())))
    q.add("acme/x", HubFile("bad.gguf", ["bad.gguf"], 100, {}))
    q.add("acme/x", HubFile("good.gguf", ["good.gguf"], 100, {}))
    qtbot.waitUntil(lambda: q.items[1].state == DONE, timeout=10_000)
    assert q.items[0].state == FAILED and q.items[0].error == "ValueError: the server sent a short chunk"
    assert (0, RUNNING, 10, threading.main_thread().ident) in seen          # its progress arrived first
    assert q.items[1].path == tmp / "good.gguf" and q.active is None
