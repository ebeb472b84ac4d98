"""``python -m engine bench documents``: what a second question about an attached document costs.

Documents go whole into the slot after the system prompt (engine/documents.py), so
system prompt plus documents is one prefix the prefix cache and its disk store keep.
Side by side in one run, on a real PDF (written with fpdf2 from this project's documentation,
read back with pdfium, about 6k tokens for the bundled model's 8k context) and on a
folder of source files (three of ``engine/kv``'s, with a .gitignore):

- TTFT of the first question (the document read cold),
- of a second question in the same conversation,
- of the same question in a new conversation with the same document,
- and after a restart (a new engine over the same disk store),

each as a ratio against the first question's TTFT in the same run; and each answer
checked against an engine without a cache (greedy: identical text).
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

from ..inputs.documents import Document, read_document, read_folder, system_with_documents
from ..prompt.messages import Message
from ..types import SamplingParams

QUESTIONS = ("What does this document describe?", "Which command runs the tests?",
             "Name one thing the engine caches.")


def manual_text() -> str:
    """The project's documentation as one text: the README, then docs/ in name order."""
    root = Path(__file__).resolve().parents[2]
    files = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    return "\n\n".join(f.read_text(encoding="utf-8") for f in files)


def _readme_pdf(pages: int, words_per_page: int) -> bytes:
    from fpdf import FPDF  # a dev dependency: benchmarks run from a checkout

    text = manual_text()
    words = " ".join(b for b in text.split("\n\n") if not b.startswith(("```", "|"))).split()
    pdf = FPDF()
    pdf.set_auto_page_break(False)
    pdf.set_font("Helvetica", size=8)
    for i in range(pages):
        chunk = words[i * words_per_page:(i + 1) * words_per_page]
        body = " ".join(chunk).encode("latin-1", "replace").decode("latin-1")
        pdf.add_page()
        pdf.multi_cell(0, 3.5, f"Page {i + 1}. {body}")
    return bytes(pdf.output())


def _ask(engine, messages, max_tokens: int) -> tuple[float, str, Any]:
    final = list(engine.stream(messages, SamplingParams(temperature=0.0, max_tokens=max_tokens)))[-1]
    return final.stats.ttft_ms, final.text, final.stats


def _case(name: str, docs: list[Document], a: argparse.Namespace) -> dict[str, Any]:
    from ..engine import Engine
    from ..config import EngineConfig

    system = Message("system", system_with_documents("Answer in one sentence.", docs))
    q1, q2, q3 = QUESTIONS
    n_ctx = a.n_ctx
    rows: dict[str, list[float]] = {"first": [], "second": [], "new_conversation": [], "restart": []}
    same = True
    tokens = 0
    for r in range(a.rounds):
        with tempfile.TemporaryDirectory() as disk:
            kw = dict(n_ctx=n_ctx, n_threads=a.threads, backend=a.backend)
            e = Engine.open(EngineConfig(a.model, disk_cache=disk, **kw))
            ref = Engine.open(EngineConfig(a.model, cache_budget=0, **kw))
            try:
                tokens = len(e.prompt_tokens([system]))
                first, a1, _ = _ask(e, [system, Message("user", q1)], a.tokens)
                h2 = [system, Message("user", q1), Message("assistant", a1), Message("user", q2)]
                second, a2, s2 = _ask(e, h2, a.tokens)
                new, a3, s3 = _ask(e, [system, Message("user", q3)], a.tokens)
                for h, got in ((h2, a2), ([system, Message("user", q3)], a3)):
                    ref.reset()
                    same &= _ask(ref, h, a.tokens)[1] == got
            finally:
                e.close()
                ref.close()
            e = Engine.open(EngineConfig(a.model, disk_cache=disk, **kw))
            try:
                restart, a4, s4 = _ask(e, [system, Message("user", q2)], a.tokens)
            finally:
                e.close()
        for k, v in (("first", first), ("second", second), ("new_conversation", new), ("restart", restart)):
            rows[k].append(v)
        print(f"  {name} round {r + 1}: answers identical to uncached so far: {same}; first {first:.0f} ms, "
              f"second {second:.1f} ms "
              f"(prefilled {s2.prefill_tokens}), new conversation {new:.1f} ms (prefilled {s3.prefill_tokens}), "
              f"restart {restart:.1f} ms (prefilled {s4.prefill_tokens})", flush=True)
    med = {k: statistics.median(v) for k, v in rows.items()}
    return {"documents": [d.name for d in docs], "pages": sum(len(d.pages) for d in docs),
            "prefix_tokens": tokens, "ttft_ms": med,
            "speedup": {k: med["first"] / med[k] for k in ("second", "new_conversation", "restart")},
            "answers_identical_to_uncached": same}


def bench_documents(a: argparse.Namespace) -> dict:
    cases = set(getattr(a, "cases", "pdf,folder").split(","))
    out = {}
    if "pdf" in cases:
        pdf = read_document("README.pdf", _readme_pdf(a.pages, a.words_per_page))
        out["pdf"] = _case("pdf", [pdf], a)
    with tempfile.TemporaryDirectory() as tmp:
        if "folder" not in cases:
            return _summary(out)
        # A folder of this project's source, sized for an 8k context, with a .gitignore to respect.
        src = Path(__file__).resolve().parents[1] / "kv"
        for name in ("__init__.py", "disk_store.py", "reuse.py"):
            (Path(tmp) / name).write_bytes((src / name).read_bytes())
        (Path(tmp) / "notes.pyc").write_bytes(b"\x00compiled")
        (Path(tmp) / ".gitignore").write_text("*.pyc\n")
        folder, _skipped = read_folder(tmp)
        out["folder"] = _case("folder", folder, a)
    return _summary(out)


def _summary(out: dict) -> dict:
    for name, c in out.items():
        s = c["speedup"]
        print(f"{name}: {c['pages']} pages, {c['prefix_tokens']} tokens of system prompt + documents; "
              f"TTFT first {c['ttft_ms']['first']:.0f} ms; second question {s['second']:.1f}x faster, "
              f"new conversation {s['new_conversation']:.1f}x, after a restart {s['restart']:.1f}x; "
              f"answers identical to uncached: {c['answers_identical_to_uncached']}")
    return out
