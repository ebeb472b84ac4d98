"""Messages in, prompt tokens out: the chat template, BOS, and what to leave
out when a conversation no longer fits in the context.

A conversation longer than the context goes on: under every policy but
"stop" (engine/prompt/view.py) the oldest turns are left out in one larger
step (the system prompt and pinned messages always stay), and the caller is
told how many and where the view begins, so the window can mark the cut. The
cut is sticky: the next turn keeps the same cut while it fits, so the tokens
after the system prompt stay the same from turn to turn and the KV (and
prefix cache) keep serving them.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from time import perf_counter
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from .chat_template import ChatTemplate
from ..errors import HearthError, PromptTooLongError
from ..inputs.images import DecodedImage, decode
from ..kv.prefix_cache import common_prefix_len
from .messages import ImagePart, Message, Part, TextPart, merge
from .view import MIN_ROOM, CONTEXT_POLICIES, Cut, check_policy, cut_points, head_of, target_tokens

if TYPE_CHECKING:
    from ..backends.base import Backend

__all__ = ["CONTEXT_POLICIES", "Prompt", "PromptBuilder", "as_messages"]


@dataclass(slots=True, frozen=True)
class Prompt:
    tokens: list[int]
    messages: list[Message]  # what was rendered (after merging and the cut)
    dropped: int = 0         # messages left out from the start of the conversation
    text: str = ""           # the rendered prompt (a reasoning layout reads whether it opened a block)
    cut: Cut | None = None   # where the conversation was cut (nothing left out: its n is its head)


def as_messages(messages: Sequence[Message | Mapping[str, Any]]) -> list[Message]:
    """Plain ``Message`` objects, with consecutive turns of the same role merged.

    Two user turns side by side happen when a reply was stopped before any
    text (it is not kept); strict templates (Mistral, Gemma) refuse that
    shape outright, so the conversation would be stuck for good. The merge
    keeps every part, the reasoning and the tool calls of both.
    """
    return merged(messages)[0]


def merged(messages: Sequence[Message | Mapping[str, Any]]) -> tuple[list[Message], list[int]]:
    """``as_messages``, and the index in ``messages`` of each merged message's first message."""
    out: list[Message] = []
    origin: list[int] = []
    for i, m in enumerate(messages):
        msg = m if isinstance(m, Message) else Message.from_dict(m)
        if out and out[-1].role == msg.role and msg.role in ("user", "assistant"):
            out[-1] = merge(out[-1], msg)
        else:
            out.append(msg)
            origin.append(i)
    return out, origin


# Where an image goes in the rendered text: private-use characters around its index, which no
# template writes and a user's own "<__media__>" or "<image>" cannot imitate.
_MARK = "\ue000hearth-image-{}\ue001"
_MARK_RE = re.compile("\ue000hearth-image-(\\d+)\ue001")


def with_markers(msgs: list[Message]) -> tuple[list[Message], list[ImagePart]]:
    """Messages whose image parts are text markers (any template renders them in place), and
    the images in marker order."""
    images: list[ImagePart] = []
    out: list[Message] = []
    for m in msgs:
        if not any(isinstance(p, ImagePart) for p in m.parts):
            out.append(m)
            continue
        parts: list[Part] = []
        for p in m.parts:
            if isinstance(p, ImagePart):
                parts.append(TextPart(_MARK.format(len(images))))
                images.append(p)
            else:
                parts.append(p)
        out.append(dataclasses.replace(m, content="", parts=tuple(parts)))
    return out, images


class PromptBuilder:
    """Renders conversations for one backend and fits them into its context."""

    def __init__(self, backend: Backend, template: ChatTemplate) -> None:
        self.backend = backend
        self.template = template
        self._sys_tokens: dict[str, list[int]] = {}
        self._img_tokens: dict[tuple, list[int]] = {}  # shared_image_tokens, per system prompt and images
        self._images: dict[str, DecodedImage] = {}  # decoded once per prompt build, not per candidate cut
        self._cut: tuple[tuple[Message, ...], int] | None = None  # (the messages left out, how many)
        # Seconds spent rendering and tokenizing so far; a request's timeline diffs them.
        self.template_s = 0.0
        self.tokenize_s = 0.0

    def render(self, messages: Sequence[Message | Mapping[str, Any]],
               template_kwargs: Mapping[str, Any] | None = None) -> str:
        """The prompt text; ``template_kwargs`` reach the template as variables
        (``{"enable_thinking": False}``, ``{"reasoning_effort": "high"}``)."""
        return self.template.render(as_messages(messages), add_generation_prompt=True, **(template_kwargs or {}))

    def tokens(self, messages: Sequence[Message | Mapping[str, Any]],
               template_kwargs: Mapping[str, Any] | None = None) -> list[int]:
        return self._encode(messages, template_kwargs)[1]

    def _encode(self, messages: Sequence[Message | Mapping[str, Any]],
                template_kwargs: Mapping[str, Any] | None) -> tuple[str, list[int]]:
        t0 = perf_counter()
        marked, images = with_markers(as_messages(messages))
        text = self.render(marked, template_kwargs)
        t1 = perf_counter()
        ids = self._tokenize(text, images)
        self.template_s += t1 - t0
        self.tokenize_s += perf_counter() - t1
        return text, ids

    def _tokenize(self, text: str, images: Sequence[ImagePart] = ()) -> list[int]:
        b = self.backend
        # Templates that write the BOS text themselves must not get a second BOS.
        add_bos = b.add_bos and not (b.bos_token and text.startswith(b.bos_token))
        if not images:
            return b.tokenize(text, add_bos=add_bos, special=True)
        if not b.sees_images:  # before any image is decoded; each backend says why in its own words
            return b.tokenize_images([], add_bos=add_bos)
        return b.tokenize_images(self._pieces(text, images), add_bos=add_bos)

    def _pieces(self, text: str, images: Sequence[ImagePart]) -> list[str | DecodedImage]:
        """The rendered text split at its image markers, each marker replaced by its decoded image."""
        out: list[str | DecodedImage] = []
        pos = 0
        for m in _MARK_RE.finditer(text):
            out.append(text[pos:m.start()])
            out.append(self._decoded(images[int(m.group(1))]))
            pos = m.end()
        out.append(text[pos:])
        return [p for p in out if not isinstance(p, str) or p]

    def _decoded(self, part: ImagePart) -> DecodedImage:
        img = self._images.get(part.sha256)
        if img is None:
            if part.data is None:
                raise HearthError(f"the image {part.sha256[:12]} is not in the data folder any more")
            img = decode(part.data)
            if img.sha256 != part.sha256:
                raise HearthError(f"the image {part.sha256[:12]} does not match its stored bytes")
            if len(self._images) >= 16:
                self._images.pop(next(iter(self._images)))
            self._images[part.sha256] = img
        return img

    def count(self, messages: Sequence[Message | Mapping[str, Any]],
              template_kwargs: Mapping[str, Any] | None = None) -> int:
        """How many tokens the prompt for ``messages`` takes, whole (nothing left out). Safe beside
        a reply on another thread: the template and the vocabulary are only read, and the timers a
        reply's timeline diffs are left alone."""
        marked, images = with_markers(as_messages(messages))
        return len(self._tokenize(self.render(marked, template_kwargs), images))

    def build(self, messages: Sequence[Message | Mapping[str, Any]], *, reserve: int,
              policy: str = "drop_oldest", template_kwargs: Mapping[str, Any] | None = None) -> Prompt:
        """The prompt for ``messages``, leaving ``reserve`` tokens of room for the reply.

        ``policy="stop"`` never leaves anything out: a prompt that cannot fit
        raises PromptTooLongError. Every other policy (engine/prompt/view.py)
        leaves out the oldest turns (never the system prompt, a pinned message
        or the newest message) until the view fits its share of the context.
        ``template_kwargs``: variables for the template (see ``render``).
        """
        check_policy(policy)
        msgs, origin = merged(messages)
        n_ctx = self.backend.n_ctx
        room = max(1, n_ctx - max(0, min(reserve, n_ctx // 4)))
        kw = dict(template_kwargs or {})
        text, full = self._encode(msgs, kw)
        head = head_of(msgs)
        uncut = Cut(tuple(msgs), head, head, tuple(origin))
        if policy == "stop" or len(full) <= room:
            self._check_fits(full, cut=False)
            return Prompt(full, msgs, text=text, cut=uncut)
        cuts = cut_points(msgs, head)
        if self._cut is not None:
            left_out, n = self._cut
            if n in cuts and tuple(msgs[head:n]) == left_out:
                text, kept = self._candidate(msgs, head, n, kw)
                if len(kept) <= room:
                    return self._prompt(uncut, n, text, kept)
        # The fewest turns left out that fit the policy's share of the context (binary search:
        # leaving more out never makes the prompt longer).
        found = self._fewest(uncut, cuts, target_tokens(policy, n_ctx, room), kw)
        if found is None:  # even the newest message alone is too long for the target
            n = cuts[-1]
            found = (n, self._candidate(msgs, head, n, kw))
            self._check_fits(found[1][1], cut=True)
        n, (text, toks) = found
        self._cut = (tuple(msgs[head:n]), n)
        return self._prompt(uncut, n, text, toks)

    def _fewest(self, uncut: Cut, cuts: Sequence[int], target: int, kw: Mapping[str, Any],
                extra: int = 0, timed: bool = True) -> tuple[int, tuple[str, list[int]]] | None:
        """The first of ``cuts`` whose view, with ``extra`` tokens more, fits ``target`` (binary search)."""
        lo, hi = 0, len(cuts) - 1
        best = None
        while lo <= hi:
            mid = (lo + hi) // 2
            cand = self._candidate(list(uncut.messages), uncut.head, cuts[mid], kw, timed)
            if len(cand[1]) + extra <= target:
                best, hi = (cuts[mid], cand), mid - 1
            else:
                lo = mid + 1
        return best

    @staticmethod
    def _prompt(uncut: Cut, n: int, text: str, tokens: list[int]) -> Prompt:
        cut = Cut(uncut.messages, uncut.head, n, uncut.origin)
        return Prompt(tokens, cut.view(), len(cut.left_out), text, cut)

    def _candidate(self, msgs: list[Message], head: int, n: int, kw: Mapping[str, Any],
                   timed: bool = True) -> tuple[str, list[int]]:
        view = Cut(tuple(msgs), head, n).view()
        if timed:
            return self._encode(view, kw)
        # Not timed: safe from the engine core's thread while another request is prepared (the timers
        # are a request's timeline's).
        marked, images = with_markers(as_messages(view))
        text = self.render(marked, kw)
        return text, self._tokenize(text, images)

    def view_tokens(self, view: Sequence[Message], template_kwargs: Mapping[str, Any] | None = None,
                    *, opening: bool = True) -> list[int]:
        """The tokens of ``view`` (``opening``: with the reply's opening), untimed (see ``_candidate``)."""
        marked, images = with_markers(as_messages(view))
        text = self.template.render(marked, add_generation_prompt=opening, **dict(template_kwargs or {}))
        return self._tokenize(text, images)

    def deeper(self, cut: Cut, policy: str, extra: int,
               template_kwargs: Mapping[str, Any] | None = None) -> Prompt | None:
        """Mid-reply (engine/decode/room.py): a cut that leaves more out than ``cut``, so that its view and
        ``extra`` tokens (the reply so far) fit the policy's share of the context, or at least leave
        MIN_ROOM free. None when no turn is left to leave out. The next turn keeps this cut."""
        n_ctx = self.backend.n_ctx
        later = [n for n in cut_points(list(cut.messages), cut.head) if n > cut.n]
        if not later:
            return None
        kw = dict(template_kwargs or {})
        found = self._fewest(cut, later, target_tokens(policy, n_ctx, n_ctx), kw, extra, timed=False)
        if found is None:
            found = self._fewest(cut, later[-1:], n_ctx - MIN_ROOM, kw, extra, timed=False)
            if found is None:
                return None
        n, (text, toks) = found
        self._cut = (tuple(cut.messages[cut.head:n]), n)
        return self._prompt(cut, n, text, toks)

    def keep_tokens(self, view: Sequence[Message], template_kwargs: Mapping[str, Any] | None = None) -> int:
        """How many leading tokens of ``view``'s prompt come before its newest message's words: what a
        context shift keeps when no turn is left to leave out (the system prompt, pinned messages)."""
        before = list(view[:-1])
        ta, tb = (self.view_tokens([*before, Message("user", u)], template_kwargs, opening=False) for u in "AZ")
        return common_prefix_len(ta, tb)

    def _check_fits(self, tokens: list[int], *, cut: bool) -> None:
        n_ctx = self.backend.n_ctx
        if len(tokens) >= n_ctx:
            what = "the system prompt and your newest message alone are" if cut else "the conversation is"
            raise PromptTooLongError(
                f"{what} {len(tokens)} tokens but the context holds {n_ctx}; "
                "shorten the message, start a new conversation, or raise the context length")

    def shared_system_tokens(self, messages: Sequence[Message],
                             template_kwargs: Mapping[str, Any] | None = None) -> list[int] | None:
        """The tokens every conversation with this system prompt starts with:
        the system prompt plus whatever the template always writes before a
        user's words (e.g. ``<|im_start|>user\\n``). None without a system prompt.
        ``template_kwargs`` as for ``build`` (gpt-oss writes its effort into the system part)."""
        if not messages or messages[0].role != "system":
            return None
        content = messages[0].content
        kw = dict(template_kwargs or {})
        key = content if not kw else content + "\0" + repr(sorted(kw.items(), key=lambda i: i[0]))
        shared = self._sys_tokens.get(key)
        if shared is None:  # tokenizing a long system prompt costs ~10 ms: once per prompt
            if len(self._sys_tokens) > 32:
                self._sys_tokens.clear()
            # Two renders that differ only in the user's words: their common
            # tokens are exactly what every conversation with this prompt shares.
            t0 = perf_counter()
            try:
                a, b = (self.template.render([Message("system", content), Message("user", u)],
                                             add_generation_prompt=False, **kw) for u in ("A", "Z"))
            except HearthError:  # a template that insists on another shape: the system part alone
                a = b = self.template.render(list(messages[:1]), add_generation_prompt=False, **kw)
            t1 = perf_counter()
            ta = self.backend.tokenize(a, special=True)
            tb = self.backend.tokenize(b, special=True)
            self.template_s += t1 - t0
            self.tokenize_s += perf_counter() - t1
            shared = self._sys_tokens[key] = ta[:common_prefix_len(ta, tb)]
        return shared

    def shared_image_tokens(self, messages: Sequence[Message],
                            template_kwargs: Mapping[str, Any] | None = None) -> list[int] | None:
        """The tokens every conversation shares that starts (after any system prompt) with the
        images the first user message opens with: the system prompt, the user header and those
        images. A new conversation, or a restart (the disk store), then reads them without an
        encode or a prefill. None when the first user message does not open with an image."""
        head = 1 if messages and messages[0].role == "system" else 0
        if len(messages) <= head or messages[head].role != "user":
            return None
        images = []
        for p in messages[head].parts:
            if not isinstance(p, ImagePart):
                break
            images.append(p)
        if not images:
            return None
        kw = dict(template_kwargs or {})
        key = (messages[0].content if head else None, tuple(p.sha256 for p in images),
               repr(sorted(kw.items(), key=lambda i: i[0])))
        shared = self._img_tokens.get(key)
        if shared is None:
            # Two renders that differ only in the user's words after the images (as for the system prompt).
            try:
                ta, tb = (self._encode([*messages[:head], Message.of("user", *images, u)], kw)[1]
                          for u in ("A", "Z"))
            except HearthError:  # a template that insists on another shape: no checkpoint
                return None
            if len(self._img_tokens) > 16:
                self._img_tokens.clear()
            shared = self._img_tokens[key] = ta[:common_prefix_len(ta, tb)]
        return shared
