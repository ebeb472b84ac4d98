"""Finding and moving around chats: message search, branches, pins, export and import.

A mixin of MainWindow (it uses its store, chat view, conversation list and
info bar). The store does the work (app/core/branches.py, app/core/chat_search.py,
app/core/export.py); this file only wires it to the window.
"""
from __future__ import annotations

from pathlib import Path

from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QFileDialog

from app.core import export

EXPORT_KINDS = {"markdown": ("Markdown (*.md)", ".md"), "json": ("Hearth conversation (*.json)", ".json")}


class NavigationMixin:
    def _connect_navigation(self) -> None:
        c = self.conversations
        c.hit_chosen.connect(self.open_hit)
        c.pin_requested.connect(self.toggle_pin)
        self.chat.branch_requested.connect(self.step_branch)

    # -- search ---------------------------------------------------------------

    def _search_changed(self, text: str) -> None:
        """Titles filter the list; words in any message are listed as hits below it."""
        self._refresh_list(select=self.current)
        self.conversations.show_hits(self.store.search_messages(text) if text.strip() else [])

    def focus_search(self) -> None:
        s = self.conversations.search
        s.setFocus()
        s.selectAll()

    def open_hit(self, cid: int, mid: int) -> None:
        """Open the conversation of a search hit on the branch that holds it, and show it."""
        if self._stream_here(cid):
            self.info.show_message("A reply is being written on the branch on screen; the hit opens when it "
                                   "is done (or Stop it).", "error", timeout_ms=6000)
            return
        self._leave_current()
        self.store.show_branch(cid, mid)
        self.current = cid
        self._show_current()
        if self.conversations.current_id() != cid:
            self._refresh_list(select=cid)
        self.chat.scroll_to(mid)

    # -- branches ---------------------------------------------------------------

    def _stream_here(self, cid: int | None) -> bool:
        return self.stream is not None and self.stream["conv"] == cid

    def _show_branches(self) -> None:
        if self.current is not None:
            ids = [w.mid for w in self.chat.message_widgets()]
            self.chat.set_branches(self.store.branch_positions(self.current, ids))

    def step_branch(self, mid: int, step: int) -> None:
        """Show the previous (-1) or next (+1) version of message ``mid``; the choice is
        saved, and the next message goes to the model with this branch."""
        if self.current is None:
            return
        if self._stream_here(self.current):
            self.info.show_message("Wait for the reply (or Stop it) before switching versions.", "error",
                                   timeout_ms=6000)
            return
        sibs = self.store.siblings(mid)
        place = sibs.index(mid) + step
        if not 0 <= place < len(sibs):
            return
        self.store.show_branch(self.current, sibs[place])
        self._show_current()
        self.chat.scroll_to(sibs[place])

    # -- pins -------------------------------------------------------------------

    def toggle_pin(self, cid: int) -> None:
        pinned = self.store.conversation(cid).pinned
        self.store.set_pinned(cid, not pinned)
        self._refresh_list(select=self.current)

    # -- export and import ----------------------------------------------------

    def export_conversation(self, path: str | Path, kind: str) -> Path | None:
        """Write the conversation on screen to ``path`` (Markdown or JSON); None if it failed."""
        if self.current is None:
            return None
        path = Path(path)
        text = export.to_json(self.store, self.current) if kind == "json" else \
            export.to_markdown(self.store, self.current)
        try:
            path.write_text(text, encoding="utf-8")
        except OSError as e:
            self.info.show_message(f"Not exported: {e}.", "error")
            return None
        self.info.show_message(f"Exported “{self.store.conversation(self.current).title}” to {path}.", "info",
                               timeout_ms=6000)
        return path

    def import_conversation(self, path: str | Path) -> int | None:
        """Add the conversation in a Hearth JSON file and open it; None (and why) if refused."""
        try:
            text = Path(path).read_text(encoding="utf-8")
            cid = export.import_json(self.store, text)
        except (OSError, UnicodeDecodeError, export.ImportFailed) as e:
            self.info.show_message(f"Not imported: {e}. Nothing was changed.", "error")
            return None
        self.conversations.search.clear()
        self._leave_current()
        self.current = cid
        self._show_current()
        self._refresh_list(select=cid)
        return cid

    def _ask_export(self, kind: str) -> None:
        if self.current is None:
            return
        filt, suffix = EXPORT_KINDS[kind]
        title = self.store.conversation(self.current).title
        name = "".join(ch if ch.isalnum() or ch in " -_" else "_" for ch in title).strip() or "conversation"
        path, _ = QFileDialog.getSaveFileName(self, "Export conversation", name + suffix, filt)
        if path:
            self.export_conversation(path, kind)

    def _ask_import(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Import conversation", "", EXPORT_KINDS["json"][0])
        if path:
            self.import_conversation(path)

    def copy_last_reply(self) -> None:
        text = self.chat.last_reply()
        if text is None:
            self.statusBar().showMessage("There is no reply to copy yet.", 3000)
            return
        QGuiApplication.clipboard().setText(text)
        self.statusBar().showMessage("Copied the last reply to the clipboard.", 3000)
