"""Sending messages and showing the replies as they stream.

The window's RepliesController (given the store, the engine host, the chat view, the info bar and the
status bar's labels). A stream belongs to its conversation: deltas are shown only while that conversation
is on screen, and the worker saves them to that conversation whatever is on screen. A send that fails
before any reply text comes back puts the message back in the input box.

A long prompt is read in chunks before the first token (the pending reply and the status bar say how
far; Stop works then too). A conversation that outgrew the context goes on without its oldest turns
(unless Settings say stop); the reply's metrics say how many were left out, and the chat shows a marker.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from PySide6.QtWidgets import QLabel

from engine import Message
from engine.prompt import Part

from app.window.tool_turns import ToolTurns
from app.core.tool_steps import Offer, first_step

from app.bridge.engine_host import EngineHost
from app.bridge.generation_runner import GenerationJob
from app.chat.chat_view import ChatView
from app.core.model_defaults import offered_servers
from app.core.attached_docs import DocumentShelf, store_pending, with_documents
from app.core.settings import Settings
from app.core.store import Store, StoredMessage
from app.ui.info_bar import InfoArea
from app.ui.loop_monitor import LoopMonitor
from app.window.context_view import ContextController
from app.window.reply_settings import ReplySettings

READING_SHOWN_BELOW = 99  # percent: a prompt read in one go (cached, or short) shows no progress


@dataclass(slots=True)
class ReplyStream:
    """The reply being written: where it goes, what it answers, and its text so far."""
    conv: int                  # the conversation it is saved to, whatever is on screen
    mid: int                   # the reply's message id
    user_mid: int | None       # the message it answers (None for a regenerate)
    user_text: str | None      # what the user sent, given back if nothing comes
    title: str                 # the conversation's title, for "a reply is being written in ..."
    parts: list[str] = field(default_factory=list)  # the window's one copy: the reply's widget follows it
    thought: list[str] = field(default_factory=list)  # the reasoning's deltas, kept apart from the answer's
    made: int = 0              # tool calls the reply made before this step
    offer: Offer = field(default_factory=Offer)  # the MCP tools this step was offered


class RepliesController:
    """Sending messages and showing the replies as they stream (see the module's docstring)."""

    def __init__(self, *, store: Store, host: EngineHost, chat: ChatView, info: InfoArea, monitor: LoopMonitor,
                 stats_label: QLabel, settings: Callable[[], Settings], current: Callable[[], int | None],
                 open_settings: Callable[[], None], refresh_list: Callable[[int | None], None],
                 show_branches: Callable[[], None], closed: Callable[[], bool],
                 adopt_settings: Callable[[Settings], None] = lambda s: None) -> None:
        self.store, self.host, self.chat, self.info, self.monitor = store, host, chat, info, monitor
        self.shelf = DocumentShelf(store.attachments)  # attached documents, read once a session
        chat.read_attachment, chat.attach.count_image = store.attachments.read, host.count_image_tokens
        self.doc_notes: list[str] = []  # the last history's: which documents, or passages, a reply is given
        self.doc_sources: list[dict[str, str]] = []  # and each passage's text, for the citations' preview
        self.stats_label = stats_label
        self._settings, self._current, self._open_settings = settings, current, open_settings
        self._refresh_list, self._show_branches, self._closed = refresh_list, show_branches, closed
        self.stream: ReplyStream | None = None
        self.last_stats: dict | None = None
        self.last_ids: list[int | None] = []  # the last history's stored ids, message by message
        # pins, summaries, the context meter (the window places its label) and the chat's divider
        self.context = ContextController(store=store, host=host, chat=chat, info=info, settings=settings,
                                         current=current, send=self.send)
        self.context_label = self.context.label
        self.tools = ToolTurns(store=store, chat=chat, info=info, settings=settings, adopt_settings=adopt_settings,
                               current=current)
        self.tools.next_step, self.tools.ended = self.next_step, self._tools_ended
        # a reply's sampling, system prompt and Think choice: the model's own settings and the chat's
        self.reply_settings = ReplySettings(store=store, host=host, chat=chat, settings=settings, current=current)
        self.tools.servers = lambda: offered_servers(settings(), host.identity)  # the model's own, or all

    def connect(self) -> None:
        """Follow the engine thread's reply events."""
        h = self.host
        for sig, slot in ((h.delta, self.on_delta), (h.reasoning, self.on_reasoning), (h.progress, self.on_progress),
                          (h.finished, self.on_finished), (h.failed, self.on_failed), (h.loaded, self.on_model_loaded)):
            sig.connect(slot)
        self.reply_settings.connect()
        self.context.connect()

    def streaming_in(self) -> int | None:  # the conversation a reply is being written in, if any
        return self.stream.conv if self.stream is not None else None

    def show_context(self, cid: int, msgs: list[StoredMessage] | None = None) -> None:
        """The context meter and the chat's divider (app/window/context_view.py)."""
        self.context.show(cid, msgs)

    def on_model_loaded(self, _model) -> None:
        """Another model loaded: the meter measures against its context now, not the last reply's;
        the Think control is the new model's."""
        cid = self._current()
        if cid is not None and not self._closed():
            self.show_context(cid)
        self.show_think()

    # -- the Think control (app/window/reply_settings.py) ----------------------------

    def show_think(self) -> None:
        self.reply_settings.show_think()

    def think_kwargs(self, cid: int) -> dict[str, object] | None:
        return self.reply_settings.think_kwargs(cid)

    def show_live(self) -> None:
        """The conversation on screen was just drawn from the store: if the reply is being written
        there, show its live text (the store lags the stream by up to half a second)."""
        s = self.stream
        if s is not None and s.conv == self._current():
            w = self.chat.widget(s.mid)
            if w is not None:
                w.follow(s.parts)
                w.follow_reasoning(s.thought)
                w.set_streaming(True)
        self.tools.show_live()

    def can_send(self) -> bool:
        """Say clearly why a message cannot go now; the text stays in the input box."""
        if self.host.job is not None or self.stream is not None:
            where = self.stream.title if self.stream else "another conversation"
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
                                   action=("Settings…", self._open_settings))
            return False
        return True

    def send(self, text: str) -> None:
        cid = self._current()
        if cid is None or not text.strip() or not self.can_send():
            return
        self.chat.system.flush()
        attached = self._attached()
        if attached is None:
            return
        self.start_reply(cid, text, attached=attached)
        self.chat.set_input_text("")
        self.chat.attach.clear()

    def _attached(self) -> list[Part] | None:
        """The tray's documents and images, stored by hash; None (nothing sent) if one cannot go."""
        parts, problem = store_pending(self.store.attachments, self.shelf, self.chat.attach.items,
                                       self.chat.attach.images, sees_images=self.host.sees_images)
        if problem is not None:
            self.info.show_message(f"The message was not sent: {problem[1]}. Your text is still there.", "error")
            self.chat.attach.remove(problem[0])
        return parts if problem is None else None

    def edit_and_resend(self, mid: int, text: str) -> None:
        cid = self._current()
        if cid is None or not self.can_send():
            return
        self.chat.remove_from(mid)
        self.chat.finish_edit()
        self.start_reply(cid, text, replace_from=mid)

    def regenerate(self, mid: int) -> None:
        cid = self._current()
        if cid is None or not self.can_send():
            return
        msgs = self.store.messages(cid)
        if not msgs or msgs[-1].id != mid or msgs[-1].role != "assistant":
            return
        mid = first_step(msgs, mid)  # the whole reply again, its tool calls asked again
        self.chat.remove_from(mid)
        self.start_reply(cid, None, replace_from=mid)

    def regenerate_last(self) -> None:
        cid = self._current()
        msgs = self.store.messages(cid) if cid is not None else []
        if msgs and msgs[-1].role == "assistant":
            self.regenerate(msgs[-1].id)

    def history(self, cid: int, system_prompt: str) -> list[Message]:
        """What the model is given for a reply in ``cid``."""
        think, choice = self.host.think, self.reply_settings.choice(cid)
        if think is not None and think.kind == "flag" and choice in think.choices:
            # A system-prompt flag (Nemotron: /think, /no_think), only once chosen: else the model's default.
            system_prompt = f"{choice}\n{system_prompt}".strip()
        stored = self.store.messages(cid)
        # Attached documents go whole into the slot after the system prompt: one prefix the cache keeps.
        n_ctx = self.host.model.n_ctx if self.host.model is not None else 0
        given = with_documents(self.shelf, system_prompt, stored, n_ctx=n_ctx)
        system_prompt, self.doc_notes, self.doc_sources = given.system_prompt, given.notes, given.sources
        for line in given.missing:
            self.info.show_message(line, "error")
        out = [Message("system", system_prompt)] if system_prompt.strip() else []
        out += self.reply_settings.example_turns()  # the model's own, before the chat's
        # Each with its reasoning and tool calls (the template decides what of them to keep); pinned ones
        # flagged, a summary in the place of the messages it stands for (context_view.py).
        view, ids = self.context.view(cid, stored)
        self.last_ids = [None] * len(out) + ids
        return out + view

    def start_reply(self, cid: int, user_text: str | None, replace_from: int | None = None,
                    attached: list[Part] | None = None) -> None:
        """Save the turn (one transaction), show it, and hand the job to the engine thread."""
        user_mid, mid = self.store.start_turn(cid, user_text, replace_from=replace_from, attached=attached or ())
        self.tools.reconnect_failed()
        conv = self.store.conversation(cid)
        self.stream = ReplyStream(cid, mid, user_mid, user_text, conv.title)
        show_user = None if user_mid is None else lambda: self.chat.add_message(user_mid, "user", user_text) \
            .show_documents(attached or (), self.chat.read_attachment)
        self._write(self.stream, self._settings().tool_choice, shown_first=show_user)
        self._refresh_list(self._current())  # the first message may have named the conversation
        self.chat.title.setText(conv.title)

    def next_step(self, conv: int, made: int) -> None:
        """The tools answered: write the reply's next step, which is given their results."""
        s = self.stream
        if s is None or s.conv != conv:
            return
        if not self.host.ready:
            self._tools_ended("the model was unloaded while a tool ran")
            return
        self.stream = ReplyStream(conv, self.store.begin_reply(conv), None, None, s.title, made=made)
        self._write(self.stream, "auto")

    def _write(self, s: ReplyStream, choice: str, shown_first: Callable[[], object] | None = None) -> None:
        """Hand step ``s`` to the engine thread, with the MCP tools it may call, then show it (after
        ``shown_first``: the user's message). The job goes first: the engine reads the prompt (or the
        server is asked) while the widgets are built, and its events wait in the queue until they are."""
        cid, mid = s.conv, s.mid
        history = self.history(cid, self.reply_settings.system_prompt(cid))
        s.offer, limit_note = self.tools.offer(s.made)
        if limit_note:
            choice = "none"  # the tools are shown, no more calls are made
        notes = (*self.doc_notes, limit_note) if limit_note else tuple(self.doc_notes)
        job = GenerationJob(cid, mid, history, self.reply_settings.params(cid), self.store.path,
                            context_policy=self.context.policy(cid), message_ids=tuple(self.last_ids),
                            template_kwargs=self.think_kwargs(cid),
                            notes=notes, sources=tuple(self.doc_sources), tools=s.offer.engine_tools(),
                            tool_choice=choice)
        self.host.generate(job)
        if shown_first is not None:
            shown_first()
        if cid == self._current():  # (a later step may start while another conversation is on screen)
            w = self.chat.add_message(mid, "assistant", "")
            w.follow(s.parts)
            w.follow_reasoning(s.thought)
            w.set_streaming(True)
            self._show_branches()  # a regenerate or an edit made a new version: "◀ 2/2 ▶"
        self.stats_label.setText("Waiting for the first token…")
        # From here the loop's lateness counts as the stream's: this handler's own drawing is not the reply's.
        self.monitor.begin("streaming")
        self.update_busy()

    def stop(self) -> None:
        if self.tools.busy:
            self.tools.stop()  # a call asked or running: the reply ends here
        else:
            self.host.stop()

    def _tools_ended(self, why: str) -> None:
        """The reply ended between its steps (Stop while a tool was asked or ran)."""
        s = self._end_stream()
        self.stats_label.setText("Stopped while a tool was asked for or running" if why == "stopped" else why)
        if s is not None and s.conv == self._current():
            self.chat.refresh_actions()

    def update_busy(self) -> None:
        s = self.stream
        where = s.title if s is not None and s.conv != self._current() else ""
        self.chat.set_busy(s is not None, where)

    # -- stream events ------------------------------------------------------

    def on_delta(self, mid: int, text: str) -> None:
        s = self.stream
        if s is None or s.mid != mid:
            return
        s.parts.append(text)  # the window's one copy: the reply's widget follows this list
        if s.conv == self._current():
            w = self.chat.widget(mid)
            if w is not None:
                w.grew()

    def on_reasoning(self, mid: int, text: str) -> None:
        s = self.stream
        if s is None or s.mid != mid:
            return
        s.thought.append(text)
        if s.conv == self._current():
            w = self.chat.widget(mid)
            if w is not None:
                w.reasoning_grew()

    def on_progress(self, mid: int, p: dict) -> None:
        s = self.stream
        if s is None or s.mid != mid:
            return
        if p.get("compacting"):
            self.stats_label.setText("Summarizing the oldest messages to fit the context…")
        if "prompt_total" in p:
            done, total = p["prompt_done"], p["prompt_total"]
            percent = 100 * done // max(1, total)
            if percent >= READING_SHOWN_BELOW:
                return
            self.stats_label.setText(f"Reading the prompt… {percent}% ({done:,} of {total:,} tokens)")
            w = self.chat.widget(mid) if s.conv == self._current() else None
            if w is not None:
                w.set_reading(percent)
            return
        if "tok_s" in p:
            self.stats_label.setText(f"{p['tok_s']:.1f} tok/s · TTFT {p['ttft_ms']:.0f} ms · {p['tokens']} tokens")

    def _end_stream(self) -> ReplyStream | None:
        s, self.stream = self.stream, None
        self.monitor.end("streaming")
        self.update_busy()
        return s

    def on_finished(self, mid: int, result: dict) -> None:
        s = self.stream
        calls = result.get("tool_calls") or ()
        more = s is not None and s.mid == mid and bool(calls) and result["finish_reason"] == "tool_calls"
        if not more:
            s = self._end_stream()
        else:
            self.monitor.end("streaming")  # the step's stream ended; the reply goes on with its calls
        m = result.get("metrics") or {}
        self.last_stats = m
        cached = f" · cached {m.get('cached_tokens', 0)}/{m.get('prompt_tokens', 0)} prompt tokens"
        spec = m.get("spec") or {}
        accept = (f" · draft acceptance {100 * spec['acceptance_rate']:.0f}%"
                  if spec.get("drafted") else "")
        self.stats_label.setText(f"{m.get('decode_tok_s', 0.0):.1f} tok/s · TTFT {m.get('ttft_ms', 0.0):.0f} ms"
                                 f"{cached}{accept}")
        if s is not None and s.conv == self._current():
            w = self.chat.widget(mid)
            if w is not None:
                m = result.get("metrics")
                w.set_result(result["text"], complete=result["complete"], finish_reason=result["finish_reason"],
                             metrics=m, reasoning=result.get("reasoning"),
                             reasoning_open=result.get("reasoning_open", False),
                             reasoning_tokens=(m or {}).get("reasoning_tokens"))
            self.chat.refresh_actions()
            self.show_context(s.conv)
        if more:
            self.tools.run(s.conv, mid, calls, s.offer, s.made)

    def on_failed(self, mid: int, msg: str, partial: str) -> None:
        s = self._end_stream()
        self.stats_label.setText("")
        if s is None or self._closed():
            return
        if not partial and not s.thought and s.user_mid is not None:
            # Nothing came back: undo the send and give the text back to the user.
            self.store.hide_from(s.conv, s.user_mid)
            here = s.conv == self._current()
            typed = self.chat.input_text() if here else self.store.conversation(s.conv).draft
            # Anything typed since is kept too, after the returned message.
            text = s.user_text if not typed.strip() else f"{s.user_text}\n\n{typed}"
            self.store.set_draft(s.conv, text)
            if here:
                self.chat.remove_from(s.user_mid)
                self.chat.set_input_text(text)
            if not self.info.shown(f"reply:{mid}") and not self.context.refused(s.conv, msg, (f"reply:{mid}",)):
                self.info.show_message(f"The message was not sent: {msg}. Your text is back in the input box.",
                                       "error", tags=(f"reply:{mid}",))
        else:
            if s.conv == self._current():
                w = self.chat.widget(mid)
                if w is not None:
                    thought = "".join(s.thought) or None
                    w.set_result(partial, complete=False, finish_reason="error", error=msg, reasoning=thought,
                                 reasoning_open=thought is not None and not partial)
            if not self.info.shown(f"reply:{mid}"):  # the model's loader said it already, and what to do
                self.info.show_message(f"The reply stopped with an error: {msg}. What was written is kept.",
                                       "error", tags=(f"reply:{mid}",))
        self.chat.refresh_actions()
