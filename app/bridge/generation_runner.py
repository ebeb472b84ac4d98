"""Generation off the GUI thread: one reply streamed from the engine.

The runner lives on the "engine thread" (app/bridge/engine_host.py) beside the
load runner, so a load and a generation never overlap. It only emits signals;
it never touches widgets. Stopping sets a ``threading.Event`` that the engine
checks between tokens and while it reads a long prompt; the thread is never killed.

The runner writes the reply to the database itself, on its own connection, as
it streams (throttled). So the stream keeps saving to *its* conversation
whatever the window is showing, and a crash loses at most the last half second.
"""
from __future__ import annotations

import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QObject, Signal, Slot

from engine import (ChatEngine, HearthError, Message, SamplingParams, ToolsUnsupported, is_complete, plan_tools,
                    release_openmp)
from engine.reply_formats import Tool, ToolPlan

from app.core.context_meter import covered
from app.core.store import Store

FLUSH_SECONDS = 0.5   # commit partial text at least this often...
FLUSH_DELTAS = 32     # ...or after this many deltas, whichever comes first
PROGRESS_SECONDS = 0.25


@dataclass(slots=True)
class GenerationJob:
    conversation_id: int
    message_id: int
    messages: list[Message]
    params: SamplingParams
    db_path: Path
    cancel: threading.Event = field(default_factory=threading.Event)
    context_policy: str = "drop_oldest"  # a chat longer than the context (engine/prompt/view.py)
    message_ids: tuple[int | None, ...] = ()  # each of ``messages``' stored id (None: the system prompt, a summary)
    template_kwargs: dict[str, object] | None = None  # the Think control's choice (ModelInfo.think.kwargs)
    notes: tuple[str, ...] = ()  # said in the reply's notes (which documents it was given, or which passages)
    sources: tuple[dict[str, str], ...] = ()  # the passages given (doc, where, text): the reply's citations
    tools: tuple[Tool, ...] = ()  # the MCP tools this step may call (app/core/tool_steps.py); none: no tools
    tool_choice: str = "auto"     # "auto" (the model decides) or "required" (this step must call one)


def tool_plan(engine: ChatEngine, job: GenerationJob, notes: list[str]) -> ToolPlan | None:
    """The job's tools in the loaded model's call syntax; a model whose template takes none
    writes its reply without them, and its notes say so."""
    if not job.tools:
        return None
    try:
        # One call per step: the window asks before each call runs, so a step's calls come one at a time.
        return plan_tools(engine, job.tools, job.tool_choice, parallel=False)
    except ToolsUnsupported as e:
        notes.append(f"the MCP tools were not offered: {e}")
        return None


def keep_context(store: Store, job: GenerationJob, metrics: dict) -> None:
    """What fitting the context did, in stored ids: the first message the model saw after the cut
    (``view_from``), and a summary compaction wrote, kept as the conversation's own (it is taken out
    of the reply's metrics: the summaries table holds it)."""
    start, ids = metrics.get("view_start") or 0, job.message_ids
    if start and start < len(ids) and ids[start] is not None:
        metrics["view_from"] = ids[start]
    summary = metrics.pop("summary", "")
    if summary:
        upto, covers = covered(list(ids), start)
        if upto is not None:
            store.add_summary(job.conversation_id, upto, covers, summary,
                              {k: metrics.get(k) for k in ("context_ms", "summarized_messages", "n_ctx")})


class SharedEngine:
    """The loaded engine (any implementation of the engine interface), touched only on the engine thread."""

    engine: ChatEngine | None = None
    serving = None  # app/server_host.Serving while the local server is on: the scheduler over the engine


class GenerationRunner(QObject):
    delta = Signal(int, str)         # message id, new answer text
    reasoning = Signal(int, str)     # message id, new reasoning text (what the model thinks first)
    # message id, live numbers: GenerationStats.live() ({tokens, tok_s, ttft_ms}) while the reply streams,
    # {prompt_done, prompt_total} (prompt tokens read so far) while a long prompt is read first, and
    # {compacting: True} while the model summarizes the oldest messages (the "compact" policy)
    progress = Signal(int, object)
    # message id, {text, finish_reason, complete, metrics, reasoning, reasoning_open}
    finished = Signal(int, object)
    failed = Signal(int, str, str)   # message id, error message, partial answer text

    def __init__(self, shared: SharedEngine) -> None:
        super().__init__()
        self._shared = shared
        self._stores: dict[Path, Store] = {}

    def _store(self, path: Path) -> Store:
        # One connection per database, opened on this thread (sqlite3's rule).
        if path not in self._stores:
            self._stores[path] = Store(path, recover=False)
        return self._stores[path]

    @Slot(object)
    def generate(self, job: GenerationJob) -> None:
        mid = job.message_id
        parts: list[str] = []    # the answer's deltas
        thought: list[str] = []  # the reasoning's deltas, kept apart
        store = None
        try:
            store = self._store(job.db_path)
            engine = self._shared.engine
            if engine is None:
                raise HearthError("no model is loaded")
            last_flush = last_progress = time.perf_counter()
            unflushed = 0
            def reading(done: int, total: int) -> None:  # called on this thread, between prefill chunks
                self.progress.emit(mid, {"prompt_done": done, "prompt_total": total})

            notes = list(job.notes)
            plan = tool_plan(engine, job, notes)
            # The engine runs every request, the local server's too, by priority: the window's first.
            events = engine.stream(job.messages, job.params, cancel=job.cancel, progress=reading,
                                   context_policy=job.context_policy, template_kwargs=job.template_kwargs, tools=plan)
            for ev in events:
                if ev.kind in ("delta", "reasoning"):
                    now = time.perf_counter()
                    # The texts this runner saves: joined only to save them.
                    (parts if ev.kind == "delta" else thought).append(ev.text)
                    unflushed += 1
                    (self.delta if ev.kind == "delta" else self.reasoning).emit(mid, ev.text)
                    if unflushed >= FLUSH_DELTAS or now - last_flush >= FLUSH_SECONDS:
                        store.update_reply(mid, "".join(parts), "".join(thought) if thought else None)
                        unflushed, last_flush = 0, now
                    if ev.stats is not None and now - last_progress >= PROGRESS_SECONDS:
                        last_progress = now
                        self.progress.emit(mid, ev.stats.live())  # the engine's figures, not recounted here
                elif ev.kind == "context":
                    self.progress.emit(mid, {"compacting": not ev.text})
                elif ev.kind == "final":
                    complete = is_complete(ev.finish_reason)
                    if ev.stats is not None and notes:
                        ev.stats.notes[:0] = notes
                    metrics = ev.stats.as_dict() if ev.stats is not None else None
                    if metrics is not None:
                        keep_context(store, job, metrics)
                    if metrics is not None and job.sources:
                        metrics["sources"] = [dict(x) for x in job.sources]  # exactly what was sent
                    reasoning = ev.reasoning if ev.reasoning is not None else (
                        "".join(thought) if thought else None)
                    tokens = (metrics or {}).get("reasoning_tokens") if reasoning is not None else None
                    serving = self._shared.serving
                    if serving is not None and serving.active:
                        serving.count_window_reply(ev)
                    store.finish_reply(mid, ev.text, complete=complete, finish_reason=ev.finish_reason,
                                       metrics=metrics, reasoning=reasoning, reasoning_open=ev.reasoning_open,
                                       reasoning_tokens=tokens, tool_calls=ev.tool_calls)
                    self.finished.emit(mid, {"text": ev.text, "finish_reason": ev.finish_reason,
                                             "complete": complete, "metrics": metrics, "reasoning": reasoning,
                                             "reasoning_open": ev.reasoning_open, "tool_calls": ev.tool_calls})
                    return
            raise HearthError("the engine ended the reply without a final event")
        except Exception as e:
            if not isinstance(e, HearthError):
                traceback.print_exc()
            msg = str(e) if isinstance(e, HearthError) else f"unexpected error: {type(e).__name__}: {e}"
            partial = "".join(parts)
            if store is not None:
                try:
                    store.finish_reply(mid, partial, complete=False, finish_reason="error", error=msg,
                                       reasoning="".join(thought) if thought else None,
                                       reasoning_open=bool(thought) and not parts)
                except Exception as db_err:  # keep the first error; the window still gets the text
                    msg += f" (and saving the partial reply failed: {db_err})"
            self.failed.emit(mid, msg, partial)

    @Slot()
    def release_threads(self) -> None:
        """Give back this thread's idle OpenMP team: another thread is about to compute
        (engine/openmp.py says why two teams slow both)."""
        release_openmp()

    @Slot()
    def close_stores(self) -> None:
        for s in self._stores.values():
            s.close()
        self._stores.clear()
