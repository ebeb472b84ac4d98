"""MCP tools in the window: the servers' connections, and a reply's calls, each asked first.

When a reply step ends with a tool call (app/core/tool_steps.py has the message chain),
the step's widget shows the call's card (app/chat/tool_card.py). Nothing runs until the
user says Allow, or said "Allow always" for that tool on that server while its list of
tools was the same. The call then runs on the MCP client's thread (app/bridge/mcp_client.py),
its result is saved as a tool message and shown on the card, and the replies controller
writes the next step. Deny, a failed call and a hung one (its timeout) each give the model
a result that says so. Stop ends the reply at any point, the call it waits for included,
and every call left without a result is saved as stopped, so the history stays whole.
"""
from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from PySide6.QtCore import QObject, Signal

from engine.prompt import ToolCall

from app.bridge.mcp_client import McpClient, ServerState, ToolResult
from app.chat.chat_view import ChatView
from app.chat.tool_card import ToolCard
from app.core import mcp_servers as mcp
from app.core import tool_steps
from app.core.settings import Settings
from app.core.store import Store
from app.core.tool_steps import Offer, Offered
from app.ui.info_bar import InfoArea


@dataclass(slots=True)
class Pending:
    """The calls of one reply step that are not answered yet, and the one asked or running."""
    conv: int
    mid: int                      # the step that made the calls
    calls: list[ToolCall]
    offer: Offer
    made: int                     # calls the reply had made before this step
    card: ToolCard | None = None
    future: concurrent.futures.Future | None = None
    started: float = field(default_factory=time.perf_counter)


class ToolTurns(QObject):
    """The MCP servers and the calls of the reply being written (see the module's docstring)."""

    _connected = Signal(object)      # {name: ServerState}, from the MCP thread
    _answered = Signal(object, object)  # (the future, its ToolResult), from the MCP thread

    def __init__(self, *, store: Store, chat: ChatView, info: InfoArea, settings: Callable[[], Settings],
                 adopt_settings: Callable[[Settings], None], current: Callable[[], int | None]) -> None:
        super().__init__(chat)
        self.store, self.chat, self.info = store, chat, info
        self._settings, self._adopt, self._current = settings, adopt_settings, current
        self.client: McpClient | None = None   # started with the first server
        self.states: dict[str, ServerState] = {}
        self.pending: Pending | None = None
        self.next_step: Callable[[int, int], None] = lambda conv, made: None  # the replies controller's
        self.ended: Callable[[str], None] = lambda why: None
        # The MCP servers whose tools the loaded model is offered (None: every one): its own settings'.
        self.servers: Callable[[], list[str] | None] = lambda: None
        self._said: set[str] = set()  # failures already shown (each once until it changes)
        self._connected.connect(self._on_connected)
        self._answered.connect(self._on_answered)

    # -- servers -------------------------------------------------------------

    def apply(self, settings: Settings) -> None:
        """Connect to the enabled servers of ``settings`` (off the GUI thread); close the rest."""
        wanted = [s for s in mcp.servers(settings.mcp_servers) if s.enabled]
        if not wanted and self.client is None:
            return
        if self.client is None:
            self.client = McpClient()
        fut = self.client.connect(wanted)
        fut.add_done_callback(lambda f: self._connected.emit(f.result() if not f.cancelled()
                                                              and f.exception() is None else {}))

    def reconnect_failed(self) -> None:
        """Start again the servers that failed or crashed (each new message does, and a call
        that finds its server gone)."""
        if self.client is not None:
            self.states = self.client.states()
        if any(not s.ready for s in self.states.values()):
            self.apply(self._settings())

    def _on_connected(self, states: dict[str, ServerState]) -> None:
        self.states = states
        for name, st in states.items():
            key = f"{name}: {st.error}"
            if st.error is not None and key not in self._said:
                self._said.add(key)
                self.info.show_message(f"The MCP server “{name}” cannot be used: {st.error}. Its tools are "
                                       "not offered; check it in Settings → Tools.", "error")

    def offer(self, made: int) -> tuple[Offer, str | None]:
        """The tools a reply step may call after ``made`` calls, and a note when none are left."""
        if self.client is None:
            return Offer(), None
        limit = self._settings().max_tool_calls
        servers = self.servers()
        found = tool_steps.offer([t for t in self.client.tools() if servers is None or t.server in servers])
        if made >= limit:
            # Still shown to the model (tool_choice "none"): the prompt, and so its cached prefix, stays
            # the one the steps before read; the step is written in text.
            calls = f"{made} tool call{'s' if made != 1 else ''}"
            return found, f"this reply made {calls}, the limit (Settings → Tools), so it was written without more"
        for line in found.left_out:
            if line not in self._said:
                self._said.add(line)
                self.info.show_message(f"An MCP tool is not offered to the model: {line}.", "error")
        return found, None

    def close(self) -> None:
        self.stop()
        if self.client is not None:
            self.client.close()
            self.client = None

    # -- a reply's calls ---------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self.pending is not None

    def run(self, conv: int, mid: int, calls: tuple[ToolCall, ...], offer: Offer, made: int) -> None:
        """Ask for, run and save each of step ``mid``'s calls, then have the next step written."""
        self.pending = Pending(conv, mid, list(calls), offer, made)
        self._next_call()

    def _next_call(self) -> None:
        p = self.pending
        assert p is not None
        if not p.calls:
            self.pending = None
            self.next_step(p.conv, p.made)
            return
        call = p.calls[0]
        found = p.offer.find(call.name)
        p.card = self._card(p, call, found)
        if found is None:
            self._answer(tool_steps.UNKNOWN, ToolResult(f"There is no tool called {call.name!r}.", True))
            return
        st = self.states.get(found.server)
        allow = self._settings().tool_allow
        if st is not None and st.ready and mcp.always_allowed(allow, found.server, found.name, st.fingerprint):
            self._start(found, "allowed always (Settings → Tools revokes it)")
        elif p.card is not None:
            p.card.ask()

    def _card(self, p: Pending, call: ToolCall, found: Offered | None) -> ToolCard | None:
        """The call's card on the step's widget, if the conversation is on screen."""
        if p.conv != self._current() or self.chat.widget(p.mid) is None:
            return None
        card = self.chat.tool_card(p.mid, call, found.server if found else "", found.name if found else call.name)
        card.decided.connect(self._decided)
        card.destroyed.connect(lambda _=None, c=card: self._forget(c))  # the chat was cleared (another one shown)
        return card

    def _forget(self, card: ToolCard) -> None:
        if self.pending is not None and self.pending.card is card:
            self.pending.card = None

    def show_live(self) -> None:
        """The conversation was drawn again from the store: put back the card being asked or run."""
        p = self.pending
        if p is None or not p.calls or p.conv != self._current() or self.chat.widget(p.mid) is None:
            return
        found = p.offer.find(p.calls[0].name)
        p.card = self._card(p, p.calls[0], found)
        if p.card is not None:
            if p.future is not None:
                p.card.running()
            else:
                p.card.ask()

    def _decided(self, answer: str) -> None:
        p = self.pending
        if p is None or p.future is not None or self.sender() is not p.card:
            return
        found = p.offer.find(p.calls[0].name)
        assert found is not None
        if answer == "deny":
            self._answer(tool_steps.DENIED, ToolResult(tool_steps.DENIED_TEXT))
            return
        if answer == "always":
            st = self.states.get(found.server)
            s = self._settings()
            if st is not None and st.ready:
                allow = {**s.tool_allow, mcp.allow_key(found.server, found.name): st.fingerprint}
                self._adopt(replace(s, tool_allow=allow))
        self._start(found)

    def _start(self, found: Offered, why: str = "") -> None:
        p = self.pending
        assert p is not None and self.client is not None
        if p.card is not None:
            p.card.running(why)
        p.started = time.perf_counter()
        p.future = fut = self.client.call(found.server, found.name, tool_steps.arguments(p.calls[0]),
                                          self._settings().tool_timeout_s)
        fut.add_done_callback(lambda f: None if f.cancelled() else self._answered.emit(f, _result(f)))

    def _on_answered(self, fut: concurrent.futures.Future, result: ToolResult) -> None:
        p = self.pending
        if p is None or fut is not p.future:
            return  # stopped meanwhile: its result is not wanted
        ending = tool_steps.FAILED if result.error else tool_steps.DONE
        if result.error:
            self.info.show_message(f"A tool call failed: {result.text}. The model was told so.", "error")
            self.reconnect_failed()  # a server that crashed is started again for the next call
        self._answer(ending, result)

    def _answer(self, ending: str, result: ToolResult) -> None:
        """Save the first waiting call's result, show it, and go on to the next."""
        p = self.pending
        assert p is not None
        call = p.calls.pop(0)
        found = p.offer.find(call.name)
        seconds = result.seconds or (time.perf_counter() - p.started if p.future is not None else 0.0)
        self._save(p, call, found, ending, result.text, seconds)
        if p.card is not None:
            p.card.finish(ending, result.text, seconds)
        p.card, p.future = None, None
        p.made += 1
        self._next_call()

    def _save(self, p: Pending, call: ToolCall, found: Offered | None, ending: str, text: str,
              seconds: float) -> None:
        text = text or "(the tool returned nothing)"
        mid = self.store.add_message(p.conv, "tool", text, tool_call_id=call.id)
        self.store.finish_reply(mid, text, complete=True, finish_reason=ending,
                                metrics=tool_steps.card_metrics(found.server if found else "",
                                                                found.name if found else call.name, seconds))

    def stop(self) -> None:
        """End the reply now: the call waited for is cancelled, and each call left is saved as stopped."""
        p = self.pending
        if p is None:
            return
        self.pending = None
        if p.future is not None:
            p.future.cancel()
        for i, call in enumerate(p.calls):
            self._save(p, call, p.offer.find(call.name), tool_steps.STOPPED, tool_steps.STOPPED_TEXT, 0.0)
            if i == 0 and p.card is not None:
                p.card.finish(tool_steps.STOPPED, "")
        self.ended("stopped")


def _result(fut: concurrent.futures.Future) -> ToolResult:
    """A finished call's result (the client always gives one; anything else is said as a failure)."""
    e = fut.exception()
    return fut.result() if e is None else ToolResult(f"the call failed: {type(e).__name__}: {e}", True)
