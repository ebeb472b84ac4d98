"""Sending messages and showing the replies as they stream.

A mixin of MainWindow (it uses its store, host, chat view and info bar). A
stream belongs to its conversation: deltas are shown only while that
conversation is on screen, and the worker saves them to that conversation
whatever is on screen. A send that fails before any reply text comes back
puts the message back in the input box.

A long prompt is read in chunks before the first token: the pending reply and
the status bar say how far, and Stop works then too. A conversation that
outgrew the context goes on without its oldest turns (unless Settings say
stop); the reply's stored metrics say how many were left out, and the chat
shows a marker there. Nothing else is stored for it.
"""
from __future__ import annotations

from PySide6.QtWidgets import QLabel

from engine import Message

from app.core.store import StoredMessage
from app.bridge.generation_worker import GenerationJob

READING_SHOWN_BELOW = 99  # percent: a prompt read in one go (cached, or short) shows no progress


def context_cut(messages: list[StoredMessage]) -> tuple[int, int] | None:
    """Where the latest reply's view of the conversation began, when turns were left out:
    (id of the first message the model still saw, how many messages are shown above it).

    The engine counts left-out messages as it saw them: the replies' prompt holds
    only messages with text (see ``_history``), and turns of one role side by side
    are merged into one. The same walk here finds the message it means.
    """
    last = next((i for i in range(len(messages) - 1, -1, -1)
                 if messages[i].role == "assistant" and messages[i].metrics), None)
    if last is None:
        return None
    dropped = messages[last].metrics.get("dropped_messages") or 0
    if not dropped:
        return None
    seen, role = 0, None
    for j, m in enumerate(messages[:last]):
        if not m.content:
            continue
        if m.role != role or m.role not in ("user", "assistant"):
            if seen == dropped:
                return m.id, j
            seen, role = seen + 1, m.role
    return None


def context_use(metrics: dict | None) -> tuple[str, str]:
    """The context meter's text and tooltip for a reply's metrics ('' when they do not say)."""
    m = metrics or {}
    n_ctx = m.get("n_ctx") or 0
    if not n_ctx:
        return "", ""
    prompt, reply = m.get("prompt_tokens", 0), m.get("generated_tokens", 0)
    tip = (f"The last reply in this conversation used {prompt + reply:,} of the model's {n_ctx:,}-token "
           f"context: the conversation as the model saw it ({prompt:,} tokens) and the reply ({reply:,}).")
    dropped = m.get("dropped_messages") or 0
    if dropped:
        tip += (f"\nThe conversation had outgrown the context, so its {dropped:,} oldest messages were left "
                "out (the system prompt was kept); the chat marks where.")
    else:
        tip += ("\nWhen a conversation outgrows it, its oldest messages are left out (the system prompt "
                "stays), or Hearth stops and says so: Settings → Sampling.")
    return f"Context {prompt + reply:,} / {n_ctx:,}", tip


class RepliesMixin:
    def _build_context_meter(self) -> QLabel:
        """The status bar's context meter (the caller places it)."""
        self.context_label = QLabel()
        return self.context_label

    def _show_context(self, cid: int, msgs: list[StoredMessage] | None = None) -> None:
        """Show how full the context was at the conversation's last reply, and mark
        where that reply's view of the conversation began if turns were left out."""
        msgs = self.store.messages(cid) if msgs is None else msgs
        last = next((m for m in reversed(msgs) if m.role == "assistant" and m.metrics), None)
        text, tip = context_use(last.metrics if last is not None else None)
        self.context_label.setText(text)
        self.context_label.setToolTip(tip)
        cut = context_cut(msgs)
        n_ctx = last.metrics.get("n_ctx", 0) if last is not None else 0
        self.chat.set_context_marker(*(cut or (None, 0)), n_ctx=n_ctx)

    def _can_send(self) -> bool:
        """Say clearly why a message cannot go now; the text stays in the input box."""
        if self.host.job is not None:
            where = self.stream["title"] if self.stream else "another conversation"
            self.info.show_message(f"A reply is still being written in “{where}”. Stop it or wait for it, "
                                   "then send again — your text is still in the box.", "error",
                                   timeout_ms=8000)
            return False
        if self.host.loading:
            self.info.show_message("The model is still loading. Your message is still in the box: press "
                                   "Enter again when the status bar shows the model.", "error",
                                   timeout_ms=8000)
            return False
        if not self.host.ready:
            self.info.show_message("No model is loaded, so nothing can reply. Choose a model in Settings; "
                                   "your message is still in the box.", "error",
                                   action=("Settings…", self.open_settings))
            return False
        return True

    def send(self, text: str) -> None:
        if self.current is None or not text.strip() or not self._can_send():
            return
        self.chat.system.flush()
        self._start_reply(self.current, text)
        self.chat.set_input_text("")

    def edit_and_resend(self, mid: int, text: str) -> None:
        if self.current is None or not self._can_send():
            return
        self.chat.remove_from(mid)
        self.chat.finish_edit()
        self._start_reply(self.current, text, replace_from=mid)

    def regenerate(self, mid: int) -> None:
        if self.current is None or not self._can_send():
            return
        msgs = self.store.messages(self.current)
        if not msgs or msgs[-1].id != mid or msgs[-1].role != "assistant":
            return
        self.chat.remove_from(mid)
        self._start_reply(self.current, None, replace_from=mid)

    def _regenerate_last(self) -> None:
        msgs = self.store.messages(self.current) if self.current is not None else []
        if msgs and msgs[-1].role == "assistant":
            self.regenerate(msgs[-1].id)

    def _history(self, cid: int, system_prompt: str) -> list[Message]:
        out = [Message("system", system_prompt)] if system_prompt.strip() else []
        # Cut-short replies stay in the history: the user saw them, so the model should too.
        out += [Message(m.role, m.content) for m in self.store.messages(cid) if m.content]
        return out

    def _start_reply(self, cid: int, user_text: str | None, replace_from: int | None = None) -> None:
        """Save the turn (one transaction), show it, and hand the job to the engine thread."""
        user_mid, mid = self.store.start_turn(cid, user_text, replace_from=replace_from)
        if user_mid is not None:
            self.chat.add_message(user_mid, "user", user_text)
        conv = self.store.conversation(cid)
        history = self._history(cid, conv.system_prompt)
        title = conv.title
        self.stream = {"conv": cid, "mid": mid, "user_mid": user_mid, "user_text": user_text,
                       "parts": [], "title": title}
        job = GenerationJob(cid, mid, history, self.settings.sampling_params(), self.store.path,
                            context_policy=self.settings.context_policy)
        w = self.chat.add_message(mid, "assistant", "")
        w.follow(self.stream["parts"])
        w.set_streaming(True)
        self._show_branches()  # a regenerate or an edit made a new version: "◀ 2/2 ▶"
        self.stats_label.setText("Waiting for the first token…")
        self.monitor.begin("streaming")
        self.host.generate(job)
        self._update_busy()
        self._refresh_list(select=self.current)  # the first message may have named the conversation
        self.chat.title.setText(title)

    def stop(self) -> None:
        self.host.stop()

    def _update_busy(self) -> None:
        s = self.stream
        where = s["title"] if s is not None and s["conv"] != self.current else ""
        self.chat.set_busy(s is not None, where)

    # -- stream events ------------------------------------------------------

    def _on_delta(self, mid: int, text: str) -> None:
        s = self.stream
        if s is None or s["mid"] != mid:
            return
        s["parts"].append(text)  # the window's one copy: the reply's widget follows this list
        if s["conv"] == self.current:
            w = self.chat.widget(mid)
            if w is not None:
                w.grew()

    def _on_progress(self, mid: int, p: dict) -> None:
        s = self.stream
        if s is None or s["mid"] != mid:
            return
        if "prompt_total" in p:
            done, total = p["prompt_done"], p["prompt_total"]
            percent = 100 * done // max(1, total)
            if percent >= READING_SHOWN_BELOW:
                return
            self.stats_label.setText(f"Reading the prompt… {percent}% ({done:,} of {total:,} tokens)")
            w = self.chat.widget(mid) if s["conv"] == self.current else None
            if w is not None:
                w.set_reading(percent)
            return
        self.stats_label.setText(f"{p['tok_s']:.1f} tok/s · TTFT {p['ttft_ms']:.0f} ms · "
                                 f"{p['tokens']} tokens")

    def _end_stream(self) -> dict | None:
        s, self.stream = self.stream, None
        self.monitor.end("streaming")
        self._update_busy()
        return s

    def _on_finished(self, mid: int, result: dict) -> None:
        s = self._end_stream()
        m = result.get("metrics") or {}
        self.last_stats = m
        cached = f" · cached {m.get('cached_tokens', 0)}/{m.get('prompt_tokens', 0)} prompt tokens"
        spec = m.get("spec") or {}
        accept = (f" · draft acceptance {100 * spec['acceptance_rate']:.0f}%"
                  if spec.get("drafted") else "")
        self.stats_label.setText(f"{m.get('decode_tok_s', 0.0):.1f} tok/s · TTFT {m.get('ttft_ms', 0.0):.0f} ms"
                                 f"{cached}{accept}")
        if s is not None and s["conv"] == self.current:
            w = self.chat.widget(mid)
            if w is not None:
                w.set_result(result["text"], complete=result["complete"],
                             finish_reason=result["finish_reason"], metrics=result.get("metrics"))
            self.chat.refresh_actions()
            self._show_context(s["conv"])

    def _on_failed(self, mid: int, msg: str, partial: str) -> None:
        s = self._end_stream()
        self.stats_label.setText("")
        if s is None or self._closed:
            return
        if not partial and s["user_mid"] is not None:
            # Nothing came back: undo the send and give the text back to the user.
            self.store.hide_from(s["conv"], s["user_mid"])
            here = s["conv"] == self.current
            typed = self.chat.input_text() if here else self.store.conversation(s["conv"]).draft
            # Anything typed since is kept too, after the returned message.
            text = s["user_text"] if not typed.strip() else f"{s['user_text']}\n\n{typed}"
            self.store.set_draft(s["conv"], text)
            if here:
                self.chat.remove_from(s["user_mid"])
                self.chat.set_input_text(text)
            self.info.show_message(f"The message was not sent: {msg}. Your text is back in the input box.",
                                   "error")
        else:
            if s["conv"] == self.current:
                w = self.chat.widget(mid)
                if w is not None:
                    w.set_result(partial, complete=False, finish_reason="error", error=msg)
            self.info.show_message(f"The reply stopped with an error: {msg}. What was written is kept.",
                                   "error")
        self.chat.refresh_actions()
