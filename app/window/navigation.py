"""Finding and moving around chats: message search, branches, pins, export and import.

``NavigationController`` is one of MainWindow's controllers. The store does the work
(app/core/branches.py, app/core/chat_search.py, app/core/export.py); this file only
wires it to the widgets it is given. Which conversation is on screen stays the
window's: the controller asks for it, and opens one through the window, so that
leaving a conversation always saves its drafts the same way.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QFileDialog, QStatusBar, QWidget

from app.chat.chat_view import ChatView
from app.chat.conversation_list import ConversationList
from app.core import export
from app.core.store import Store
from app.ui.info_bar import InfoArea

EXPORT_KINDS = {"markdown": ("Markdown (*.md)", ".md"), "json": ("Hearth conversation (*.json)", ".json")}


class NavigationController:
    """Search hits, versions (branches), pins, export/import and copying the last reply.

    ``current`` says which conversation is on screen; ``streaming_in`` which one a reply is
    being written in (None when none); ``open_conversation(cid, before)`` leaves the one on
    screen, runs ``before``, shows ``cid`` and selects it in the list; ``show_current`` redraws
    the one on screen; ``refresh_list(select)`` refills the conversation list."""

    def __init__(self, *, store: Store, chat: ChatView, conversations: ConversationList, info: InfoArea,
                 status_bar: QStatusBar, parent: QWidget, current: Callable[[], int | None],
                 streaming_in: Callable[[], int | None],
                 open_conversation: Callable[[int, Callable[[], None] | None], None],
                 show_current: Callable[[], None], refresh_list: Callable[[int | None], None]) -> None:
        self.store, self.chat, self.conversations, self.info = store, chat, conversations, info
        self.status_bar, self.parent = status_bar, parent
        self._current, self._streaming_in = current, streaming_in
        self._open, self._show_current, self._refresh_list = open_conversation, show_current, refresh_list

    # -- search ---------------------------------------------------------------

    def search_changed(self, text: str) -> None:
        """Titles filter the list; words in any message are listed as hits below it."""
        self._refresh_list(self._current())
        thought = self.conversations.search_reasoning.isChecked()
        self.conversations.show_hits(self.store.search_messages(text, reasoning=thought) if text.strip() else [])

    def focus_search(self) -> None:
        """Put the cursor in the search box, its text selected."""
        s = self.conversations.search
        s.setFocus()
        s.selectAll()

    def open_hit(self, cid: int, mid: int) -> None:
        """Open the conversation of a search hit on the branch that holds it, and show it."""
        if self._stream_here(cid):
            self.info.show_message("A reply is being written on the branch on screen; the hit opens when it "
                                   "is done (or Stop it).", "error", timeout_ms=6000)
            return
        self._open(cid, lambda: self.store.show_branch(cid, mid))
        self.chat.scroll_to(mid)

    # -- branches ---------------------------------------------------------------

    def _stream_here(self, cid: int | None) -> bool:
        return cid is not None and self._streaming_in() == cid

    def show_branches(self) -> None:
        """Give each message on screen its "◀ 2/3 ▶" (or none, with one version)."""
        current = self._current()
        if current is not None:
            ids = [w.mid for w in self.chat.message_widgets()]
            self.chat.set_branches(self.store.branch_positions(current, ids))

    def step_branch(self, mid: int, step: int) -> None:
        """Show the previous (-1) or next (+1) version of message ``mid``; the choice is
        saved, and the next message goes to the model with this branch."""
        current = self._current()
        if current is None:
            return
        if self._stream_here(current):
            self.info.show_message("Wait for the reply (or Stop it) before switching versions.", "error",
                                   timeout_ms=6000)
            return
        sibs = self.store.siblings(mid)
        place = sibs.index(mid) + step
        if not 0 <= place < len(sibs):
            return
        self.store.show_branch(current, sibs[place])
        self._show_current()
        self.chat.scroll_to(sibs[place])

    # -- pins -------------------------------------------------------------------

    def toggle_pin(self, cid: int) -> None:
        """Pin a conversation to the top of the list, or unpin it."""
        pinned = self.store.conversation(cid).pinned
        self.store.set_pinned(cid, not pinned)
        self._refresh_list(self._current())

    # -- export and import ----------------------------------------------------

    def export_conversation(self, path: str | Path, kind: str) -> Path | None:
        """Write the conversation on screen to ``path`` (Markdown or JSON); None if it failed."""
        current = self._current()
        if current is None:
            return None
        path = Path(path)
        text = export.to_json(self.store, current) if kind == "json" else export.to_markdown(self.store, current)
        try:
            path.write_text(text, encoding="utf-8")
        except OSError as e:
            self.info.show_message(f"Not exported: {e}.", "error")
            return None
        self.info.show_message(f"Exported “{self.store.conversation(current).title}” to {path}.", "info",
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
        self._open(cid, None)
        return cid

    def ask_export(self, kind: str) -> None:
        """File → Export: ask where, then export the conversation on screen."""
        current = self._current()
        if current is None:
            return
        filt, suffix = EXPORT_KINDS[kind]
        title = self.store.conversation(current).title
        name = "".join(ch if ch.isalnum() or ch in " -_" else "_" for ch in title).strip() or "conversation"
        path, _ = QFileDialog.getSaveFileName(self.parent, "Export conversation", name + suffix, filt)
        if path:
            self.export_conversation(path, kind)

    def ask_import(self) -> None:
        """File → Import: ask which file, then import it."""
        path, _ = QFileDialog.getOpenFileName(self.parent, "Import conversation", "", EXPORT_KINDS["json"][0])
        if path:
            self.import_conversation(path)

    def copy_last_reply(self) -> None:
        """Put the newest reply on screen on the clipboard."""
        text = self.chat.last_reply()
        if text is None:
            self.status_bar.showMessage("There is no reply to copy yet.", 3000)
            return
        QGuiApplication.clipboard().setText(text)
        self.status_bar.showMessage("Copied the last reply to the clipboard.", 3000)
