"""What a reply is given besides its messages: its sampling, its system prompt, the model's example turns,
and the Think control's choice.

Each comes in layers (app/core/model_defaults.py): Hearth's defaults (Settings → Sampling), the loaded
model's own recommendations, the user's settings for that model, and the chat's own. So switching models
switches their settings, and a chat's own settings and Think choice stay with the chat. A chat with no
system prompt of its own gets the model's; a chat that made no Think choice gets the model's default.
"""
from __future__ import annotations

from collections.abc import Callable

from engine import Message, SamplingParams
from engine.library import Layered

from app.bridge.engine_host import EngineHost
from app.chat.chat_view import ChatView
from app.chat.think_control import effective
from app.core import model_defaults as md
from app.core.settings import Settings
from app.core.store import Store


class ReplySettings:
    """The settings of the replies in each chat (see the module's docstring)."""

    def __init__(self, *, store: Store, host: EngineHost, chat: ChatView, settings: Callable[[], Settings],
                 current: Callable[[], int | None]) -> None:
        self.store, self.host, self.chat = store, host, chat
        self._settings, self._current = settings, current
        # SamplingParams fields a benchmark fixes on top of every layer (ignore_eos is for benchmarks only,
        # so it is no setting): app/window/bench_stream.py
        self.fixed: dict[str, object] = {}

    def connect(self) -> None:
        self.chat.think.chosen.connect(self.think_chosen)

    # -- sampling, the system prompt, example turns -------------------------------

    def layers(self, cid: int | None) -> Layered:
        """The settings of a reply in ``cid``, each with the layer it comes from."""
        chat = self.store.conversation(cid).settings if cid is not None else {}
        return md.reply_layers(self._settings(), self.host.identity, chat)

    def params(self, cid: int | None) -> SamplingParams:
        """The SamplingParams of a reply in ``cid`` (None: a new chat's)."""
        return self.layers(cid).params(**self.fixed)

    def system_prompt(self, cid: int) -> str:
        """The chat's system prompt, or the model's when the chat has none."""
        return md.system_prompt(self.store.conversation(cid).system_prompt, self._settings(), self.host.identity)

    def example_turns(self) -> list[Message]:
        """The loaded model's example turns (an Ollama Modelfile's MESSAGE lines), before every chat's own."""
        return [Message(m["role"], m["content"]) for m in md.example_turns(self._settings(), self.host.identity)]

    def edit_chat_settings(self, parent) -> None:
        """Chat → This chat's settings: edit the chat on screen's own settings over its model's."""
        from app.settings_ui.chat_settings_dialog import ChatSettingsDialog  # built when asked for

        cid = self._current()
        if cid is None:
            return
        conv = self.store.conversation(cid)
        dlg = ChatSettingsDialog(conv.title, conv.settings, lambda chat: md.reply_layers(
            self._settings(), self.host.identity, chat), parent)
        if dlg.exec():
            self.save_chat_settings(cid, dlg.chat)

    def save_chat_settings(self, cid: int, values: dict) -> None:
        """Keep ``values`` as the chat's own settings (checked first: a bad one is refused, nothing kept)."""
        why = md.chat_problem(values)
        if why:
            raise ValueError(why)
        self.store.set_settings(cid, values)

    # -- the Think control ----------------------------------------------------------

    def choice(self, cid: int | None) -> object:
        """The Think choice of ``cid``: the chat's own, else the model's default (None: the template's)."""
        own = self.store.conversation(cid).think if cid is not None else None
        return own if own is not None else md.think_default(self._settings(), self.host.identity)

    def show_think(self) -> None:
        """Show the loaded model's Think control (if its template has one) with this conversation's choice."""
        self.chat.think.show_for(self.host.think, self.choice(self._current()))

    def think_chosen(self, value: object) -> None:
        cid = self._current()
        if cid is not None:
            self.store.set_think(cid, value)

    def think_value(self, cid: int) -> object:
        """What the Think control is for a reply in ``cid`` (None: the model has none)."""
        return effective(self.host.think, self.choice(cid))

    def think_kwargs(self, cid: int) -> dict[str, object] | None:
        """The chat template's variables for the Think choice in ``cid`` (None: nothing to pass)."""
        think, value = self.host.think, self.think_value(cid)
        return (think.kwargs(value) or None) if think is not None and value is not None else None
