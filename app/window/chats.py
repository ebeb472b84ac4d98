"""Which conversation is on screen, and what the conversation list does: open, new, rename, delete, undo.

The window holds this controller as ``chats``; the names its callers use (``current``,
``select_conversation``, ``new_conversation``...) stay the window's own through Via attributes.
What the user typed in the conversation being left is saved before another is shown.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from app.chat.chat_view import ChatView
from app.chat.conversation_list import ConversationList
from app.core.settings import Settings
from app.core.store import Store
from app.ui.info_bar import InfoArea

if TYPE_CHECKING:
    from app.window.replies import RepliesController


class ChatsController:
    """``replies()`` and ``show_branches()`` are the window's, looked up late (they are built after this);
    ``stop_reply()`` stops the reply in flight; ``closed()`` is true once the window is closing."""

    def __init__(self, *, store: Store, chat: ChatView, conversations: ConversationList, info: InfoArea,
                 settings: Callable[[], Settings], replies: Callable[[], "RepliesController"],
                 show_branches: Callable[[], None], stop_reply: Callable[[], None],
                 closed: Callable[[], bool]) -> None:
        self.store, self.chat, self.conversations, self.info = store, chat, conversations, info
        self._settings, self._replies, self._show_branches = settings, replies, show_branches
        self._stop_reply, self._closed = stop_reply, closed
        self.current: int | None = None  # the conversation on screen

    def refresh_list(self, select: int | None) -> None:
        convs = self.store.list_conversations(self.conversations.search.text())
        self.conversations.populate(convs, select)
        if select is None and convs and not self.conversations.search.text():
            self.select_conversation(convs[0].id)

    def leave_current(self) -> None:
        """Save what the user was typing in the conversation being left."""
        if self.current is None:
            return
        self.chat.system.flush()
        self.chat.flush_draft()  # drafts save on a timer; an edit in progress saved its draft already

    def select_conversation(self, cid: int) -> None:
        if cid != self.current:
            self.open_conversation(cid)

    def open_conversation(self, cid: int, before: Callable[[], None] | None = None) -> None:
        """Leave the conversation on screen (what was typed is saved), run ``before`` (e.g. pick
        a branch), then show ``cid`` and select it in the list."""
        self.leave_current()
        if before is not None:
            before()
        self.current = cid
        self.show_current()
        if self.conversations.current_id() != cid:
            self.refresh_list(select=cid)

    def show_current(self) -> None:
        conv = self.store.conversation(self.current)
        msgs = self.store.messages(self.current)
        self.chat.show_conversation(conv.title, conv.system_prompt, conv.draft, msgs)
        replies = self._replies()
        replies.show_context(self.current, msgs)
        replies.show_live()
        replies.show_think()
        self._show_branches()
        replies.update_busy()

    def new_conversation(self) -> None:
        self.leave_current()
        settings = self._settings()
        prompt = settings.preset_prompt(settings.default_preset) or ""
        conv = self.store.create_conversation(system_prompt=prompt)
        self.conversations.search.clear()
        self.current = conv.id
        self.refresh_list(select=conv.id)
        self.show_current()
        self.chat.input.setFocus()

    def rename_conversation(self, cid: int, title: str) -> None:
        try:
            self.store.rename_conversation(cid, title)
        except ValueError as e:
            self.info.show_message(f"Not renamed: {e}.", "error", timeout_ms=6000)
        self.refresh_list(select=self.current)
        if cid == self.current:
            self.chat.title.setText(self.store.conversation(cid).title)

    def delete_conversation(self, cid: int) -> None:
        if self._replies().streaming_in() == cid:
            self._stop_reply()  # the reply so far is saved; undo brings it back
        if cid == self.current:
            self.leave_current()
        title = self.store.conversation(cid).title
        self.store.delete_conversation(cid)
        if cid == self.current:
            self.current = None
        self.refresh_list(select=self.current)
        if self.current is None:
            remaining = self.store.list_conversations()
            if remaining:
                self.select_conversation(remaining[0].id)
            else:
                self.new_conversation()
        self.info.show_message(f"Deleted “{title}”.", "info", action=("Undo", lambda: self.undo_delete(cid)),
                               timeout_ms=15000)

    def undo_delete(self, cid: int) -> None:
        self.store.restore_conversation(cid)
        self.conversations.search.clear()
        self.select_conversation(cid)
        self.refresh_list(select=cid)

    def save_system_prompt(self, text: str) -> None:
        if self.current is not None and not self._closed():
            self.store.set_system_prompt(self.current, text)

    def save_draft(self, text: str) -> None:
        if self.current is not None and not self._closed():
            self.store.set_draft(self.current, text)
