"""The window's side of a conversation that outgrew the context (engine/prompt/view.py).

What a reply is given of the conversation (the pinned messages flagged, the summary compaction
wrote in the place of the messages it stands for: app/core/context_meter.py), the status bar's
meter and the chat's divider, pinning a message, editing a summary, and the "stop" policy's
refusal with a one-click way to go on under another policy (kept as the chat's own). No message
is ever removed by any of it: only what the model is given changes.
"""
from __future__ import annotations

from typing import Callable

from PySide6.QtWidgets import QLabel

from engine.prompt import Message

from app.bridge.engine_host import EngineHost
from app.chat.chat_view import ChatView
from app.core.attached_docs import model_message
from app.core.context_meter import context_use, divider, model_view
from app.core.settings import Settings
from app.core.store import Store, StoredMessage
from app.ui.info_bar import InfoArea

GO_ON = (("compact", "Summarize the oldest and send"), ("shift", "Shift and send"),
         ("drop_oldest", "Drop the oldest and send"))
"""The one-click ways on after a refusal, as the bar shows them."""
POLICY_SAID = {"drop_oldest": "drops its oldest messages in steps", "shift": "shifts its oldest messages out",
               "compact": "summarizes its oldest messages", "stop": "stops when it is full"}


class ContextController:
    """Pins, summaries, the meter, the divider and the refusal's way on, for one window."""

    def __init__(self, *, store: Store, host: EngineHost, chat: ChatView, info: InfoArea,
                 settings: Callable[[], Settings], current: Callable[[], int | None],
                 send: Callable[[str], None]) -> None:
        self.store, self.host, self.chat, self.info = store, host, chat, info
        self._settings, self._current, self._send = settings, current, send
        self.label = QLabel()  # the status bar's context meter (the window places it)

    def connect(self) -> None:
        self.chat.pin_requested.connect(self.pin)
        self.chat.summary_edited.connect(self.edit_summary)

    def policy(self, cid: int) -> str:
        """The chat's own context policy, else Settings'."""
        return self.store.conversation(cid).context_policy or self._settings().context_policy

    def view(self, cid: int, stored: list[StoredMessage]) -> tuple[list[Message], list[int | None]]:
        """What a reply in ``cid`` is given of ``stored`` (its branch), and each message's stored id."""
        summary = self.store.summary_on(cid, [m.id for m in stored])
        return model_view(stored, summary, lambda m: model_message(m, self.store.attachments))

    def show(self, cid: int, msgs: list[StoredMessage] | None = None) -> None:
        """The meter (how full the context was at the last reply, what was left out or summarized) and the
        divider where the model's view begins, with its summary."""
        msgs = self.store.messages(cid) if msgs is None else msgs
        last = next((m for m in reversed(msgs) if m.role == "assistant" and m.metrics), None)
        model = self.host.model
        loaded = model.n_ctx if model is not None else 0
        exact = model is None or model.capabilities.exact_tokens
        text, tip = context_use(last.metrics if last is not None else None, loaded, exact)
        own = self.store.conversation(cid).context_policy
        if text and own:
            tip += f"\nThis chat {POLICY_SAID.get(own, own)} (chosen when it outgrew the context)."
        self.label.setText(text)
        self.label.setToolTip(tip)
        self.chat.attach.measure(loaded, last.metrics if last is not None else None)
        self.chat.set_divider(divider(msgs, self.store.summary_on(cid, [m.id for m in msgs])))

    def pin(self, mid: int, on: bool) -> None:
        """Pin or unpin a message: the next reply keeps it in the model's view (or may leave it out)."""
        self.store.set_message_pinned(mid, on)
        w = self.chat.widget(mid)
        if w is not None:
            w.set_pinned(on)
        cid = self._current()
        if cid is not None:
            self.show(cid)

    def edit_summary(self, sid: int, text: str) -> None:
        """The user's words for a summary: the model is given them from the next reply on."""
        try:
            self.store.edit_summary(sid, text)
        except (KeyError, ValueError) as e:
            self.info.show_message(f"The summary was not changed: {e}.", "error")
        cid = self._current()
        if cid is not None:
            self.show(cid)

    def refused(self, cid: int, why: str, tags: tuple[str, ...]) -> bool:
        """A message "stop" refused because the chat outgrew the context: say so, with one click to go on
        under another policy. False when ``why`` is another failure (the caller says it)."""
        if "context holds" not in why or self.policy(cid) != "stop":
            return False
        bar = self.info.show_message(f"The message was not sent: {why}. Your text is back in the input box. "
                                     "Go on without the oldest messages (this chat keeps the choice; pinned "
                                     "messages always stay):", "error", tags=tags)
        for policy, label in reversed(GO_ON):  # each added first: this shows them in GO_ON's order
            bar.add_action(label, lambda _checked=False, p=policy: self.go_on(cid, p))
        return True

    def go_on(self, cid: int, policy: str) -> None:
        """Keep ``policy`` as the chat's own and send what is in the input box again."""
        self.store.set_context_policy(cid, policy)
        text = self.chat.input_text()
        if cid == self._current() and text.strip():
            self._send(text)
