"""One request made ready to decode, the same way on every path.

``prepare_request`` is what the single-sequence engine (``Engine.stream`` and
``complete``) and the batched API path (``decode.batch``) both call: the prompt
(a chat through the model's template, the tools in it, cut to fit the context;
or raw text), whether the prompt opened a reasoning block, and which tool calls
the reply may make. ``Prepared.constraint`` builds the grammar the reply follows.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ..errors import HearthError
from ..prompt.builder import PromptBuilder
from ..prompt.messages import Message
from ..prompt.view import Cut
from ..reply_formats import Layout, opens_in_prompt
from ..reply_formats.tools import ToolPlan
from ..types import SamplingParams
from .call_closing import CallClosing, call_closing
from .constraint import tool_constraint

if TYPE_CHECKING:
    from ..backends.base import Backend, TokenConstraint


@dataclass(slots=True, frozen=True)
class Compaction:
    """The summary that took the place of the oldest messages (engine/prompt/summary.py): its text,
    how many messages it stands for, where the caller's list goes on after them, and its cost."""
    summary: str
    summarized: int
    view_start: int
    ms: float
    tokens: int = 0


@dataclass(slots=True)
class Prepared:
    """A request ready to decode: its prompt tokens, and what shapes and reads its reply.

    ``layout``/``opened``: the model's reasoning layout (None for raw text) and whether the
    prompt already opened its block. ``tools``: the calls the reply may make (None also for
    ``tool_choice`` "none", whose tools the model is only shown). ``messages`` and
    ``template_kwargs``: what was rendered, for the engine's shared-prefix checkpoints.
    """
    tokens: list[int]
    params: SamplingParams
    layout: Layout | None = None
    opened: bool = False
    tools: ToolPlan | None = None
    dropped: int = 0
    messages: list[Message] = field(default_factory=list)
    template_kwargs: Mapping[str, Any] | None = None
    # The conversation's cut (engine/prompt/view.py), the context policy asked for, and the builder that
    # leaves more out if the reply fills the context (engine/decode/room.py); None for raw text.
    cut: Cut | None = None
    policy: str = "stop"
    builder: PromptBuilder | None = None
    compaction: Compaction | None = None
    _tool_gbnf: str | None = field(default=None, repr=False)  # the tools' grammar, built once (an agent's: 0.1 s)

    def tool_grammar(self) -> str:
        """The GBNF every tool call of the reply follows (``tools`` must be set)."""
        assert self.tools is not None
        if self._tool_gbnf is None:
            self._tool_gbnf = self.tools.grammar()
        return self._tool_gbnf

    def constraint(self, backend: "Backend") -> "TokenConstraint | None":
        """The grammar the reply follows: every tool call's, else ``params.grammar``'s, else None.
        Build it after the prompt is known to fit; the caller closes it."""
        if self.tools is not None:
            return tool_constraint(backend, self.tools, self.tool_grammar())
        return None if self.params.grammar is None else backend.grammar(self.params.grammar)

    def closing(self, backend: "Backend", n_ctx: int) -> CallClosing | None:
        """For a forced tool call (``tool_choice`` required or a tool's name), the check that its call
        closes within the reply's budget (call_closing.py); None for any other reply."""
        if self.tools is None or self.tools.lazy:
            return None
        return call_closing(backend, self.tool_grammar(), prompt_len=len(self.tokens), limit=self.params.limit,
                            n_ctx=n_ctx)


def prepare_request(prompts: PromptBuilder, layout: Layout | None, params: SamplingParams, *,
                    messages: Sequence[Message | Mapping[str, Any]] | None = None, text: str | None = None,
                    context_policy: str = "drop_oldest", template_kwargs: Mapping[str, Any] | None = None,
                    tools: ToolPlan | None = None) -> Prepared:
    """``messages`` through the model's template (``layout``: its reasoning layout), or raw
    ``text`` (no template, special tokens read as such). ``tools`` (``plan_tools``): given to
    the template; the reply may call them unless ``tool_choice`` is "none". A conversation
    longer than the context loses its oldest turns or raises PromptTooLongError
    (``context_policy``, as ``PromptBuilder.build``)."""
    if text is not None:
        b = prompts.backend
        tokens = b.tokenize(text, add_bos=b.add_bos, special=True)
        if not tokens:
            raise HearthError("the prompt is empty")
        return Prepared(tokens, params)
    if messages is None:
        raise HearthError("a request needs messages or a prompt")
    if tools is not None:
        template_kwargs = tools.with_tools(template_kwargs)
        tools = tools.calling()  # tool_choice "none": shown to the model, never called
    built = prompts.build(messages, reserve=params.limit, policy=context_policy,
                          template_kwargs=template_kwargs)
    return Prepared(built.tokens, params, layout, opens_in_prompt(layout, built.text), tools, built.dropped,
                    built.messages, template_kwargs, built.cut, context_policy, prompts)
