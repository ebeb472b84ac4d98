"""reply_formats/gbnf.py and grammar_walk.py: GBNF read as llama.cpp reads it, followed text by text,
and the shortest completion from any point, checked against llama.cpp's own grammar sampler over
the bundled model's vocabulary, for every tool-call syntax and every recorded agent's and MCP
server's tool schema."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from engine.bench.agent_proxy import recorded_tools
from engine.bench.tools import TOOLS, check
from engine.reply_formats.gbnf import CHAR, REF, REP, GbnfError, parse_gbnf
from engine.reply_formats.grammar_walk import Walk, WalkError, walk_for
from engine.reply_formats.tool_parser import ToolCallParser
from engine.reply_formats.tools import ToolPlan
from engine.reply_formats.tool_syntax import SYNTAXES, syntax_by_name

RECORDED = tuple(t for group in recorded_tools(Path(__file__).parent / "fixtures").values() for t in group)
# What a random walk tries to write: structure first (so it gets deep), then text, non-ASCII included.
STRUCTURE = list('"{}[],:0123456789-.tfn\n ')
TEXT = list("abcxyzABC_/é北🙂<>|=")


def walk_of(text: str) -> Walk:
    return Walk(parse_gbnf(text))


def completes(w: Walk, text: str) -> bool:
    st = w.feed(w.start(), text.encode())
    return st is not None and st.complete


def test_gbnf_is_read_as_llama_cpp_reads_it():
    rules = parse_gbnf('# a comment\nroot ::= "a\\x41\\u00e9" [^"\\\\\\n-] b{2,3} (c | "d")* b?\n'
                       'b ::= [0-9] # trailing\nc ::=\n  "x"+ | "y"{2,}\n')
    names = dict(zip(rules.names, range(len(rules.names))))
    first = rules.alts[rules.of_rule[rules.root][0]]
    assert [e[1][0][0] for e in first[:3]] == [ord("a"), ord("A"), 0xE9]   # each escape, one character
    assert first[3] == (CHAR, ((ord('"'), ord('"')), (ord("\\"), ord("\\")), (10, 10), (ord("-"), ord("-"))), True)
    assert first[4] == (REP, names["b"], 2, 3)
    assert first[5][0] == REP and first[5][2:] == (0, -1)   # a group, repeated
    assert first[6] == (REP, names["b"], 0, 1)
    assert rules.alts[rules.of_rule[names["b"]][0]] == ((CHAR, ((48, 57),), False),)
    w = Walk(rules)
    for good in ('aAé!12', 'aAé!123xxyy', 'aAé!12dxxxd7'):
        assert completes(w, good), good
    for bad in ('aAé"12', 'aAé!1', 'aAé!12345', 'aAé!12y', 'aAé!12xy'):
        assert not completes(w, bad), bad
    with pytest.raises(GbnfError, match="not defined"):
        parse_gbnf("root ::= missing\n")
    with pytest.raises(GbnfError, match="token"):
        parse_gbnf("root ::= <[12]>\n")
    with pytest.raises(WalkError):
        walk_of("root ::= root \"a\"\n")   # no finite text


def test_the_shortest_completion_is_the_shortest_and_counts_in_bytes():
    w = walk_of('root ::= "[" item ("," item){1,3} "]" | "none!!"\nitem ::= "é" | [a-c] [0-9]{2,} | "long"\n')
    st = w.start()
    assert w.shortest(st) == b"none!!" and st.need == 6   # "[é,é]": 7 bytes (é is 2)
    st = w.feed(st, b"[a1")
    assert st is not None and w.shortest(st) == b'1,\xc3\xa9]' and st.need == 5   # a digit, a comma, é, "]"
    st = w.feed(st, b"23,l")
    assert st is not None and w.shortest(st) == b"ong]" and st.need == 4
    st = w.feed(st, b"ong,\xc3")   # half of é: the walker waits for its second byte
    assert st is not None and st.partial == b"\xc3" and w.shortest(st) == b"\xa9]"
    end = w.feed(st, b"\xa9]")
    assert end is not None and end.complete
    assert w.feed(w.start(), b"[x") is None   # what the grammar refuses


def test_a_half_written_character_is_finished_as_the_smallest_one_the_grammar_takes():
    w = walk_of('root ::= "<" [^a-z]{1,3} ">"\n')
    assert w.shortest(w.feed(w.start(), b"<\xf0\x9f")) == b"\x80\x80>"   # U+1F000, then the close
    assert w.shortest(w.feed(w.start(), b"<\xed")) == b"\x80\x80>"   # U+D000: never a surrogate (from U+D800)
    w = walk_of('root ::= "<" ("é" | "😀") ">"\n')
    assert w.shortest(w.feed(w.start(), b"<\xf0")) == "😀>".encode()[1:]
    assert w.shortest(w.feed(w.start(), b"<\xc3")) == "é>".encode()[1:]


def test_a_date_is_completed_with_a_real_date():
    plan = ToolPlan(syntax_by_name("hermes"), TOOLS, "book_table", parallel=False)
    w = walk_for(plan.grammar())
    assert b'"date":"1111-01-01"' in (w.shortest(w.start()) or b"")


@pytest.mark.parametrize("syntax", [s.name for s in SYNTAXES])
def test_the_shortest_call_of_every_builtin_tool_parses_and_validates(syntax):
    """What steering writes when a reply has no room left: a call the parser reads and jsonschema accepts."""
    for t in TOOLS:
        plan = ToolPlan(syntax_by_name(syntax), TOOLS, t.name, parallel=False)
        w = walk_for(plan.grammar())
        text = w.shortest(w.start()).decode()
        parser = ToolCallParser(plan)
        parser.feed(text)
        assert parser.finish()[1] == ""   # no call cut short
        assert check(parser.calls, TOOLS, t.name) is None, (syntax, text)


def random_prefix(w: Walk, rng: random.Random, chars: int) -> str:
    """Up to ``chars`` characters the grammar takes: structure or text at random, else the next character
    of the shortest completion (a literal's, a closing bracket...)."""
    st, out = w.start(), []
    for _ in range(chars):
        order = rng.sample(STRUCTURE, len(STRUCTURE)) + rng.sample(TEXT, len(TEXT))
        if rng.random() < 0.5:
            order = order[len(STRUCTURE):] + order[:len(STRUCTURE)]
        rest = (w.shortest(st) or b"").decode("utf-8", "ignore")[:1]
        order = [rest, *order] if rest and rng.random() < 0.4 else [*order, rest] if rest else order
        for ch in order:
            nxt = w.feed(st, ch.encode())
            if nxt is not None:
                st = nxt
                out.append(ch)
                break
        else:
            break
    return "".join(out)


def llama_takes(backend, gbnf: str, data: bytes) -> bool:
    """llama.cpp's grammar takes ``data`` token by token (the walker too), and may end after it."""
    g = backend.grammar(gbnf)
    w = walk_for(gbnf)
    st = w.start()
    try:
        toks = backend.tokenize(data.decode(), special=False)
        assert b"".join(backend.special_bytes(t) for t in toks) == data
        for t in toks:
            st = w.feed(st, backend.special_bytes(t))
            if st is None or not g.takes(t):
                return False
            g.accept(t)
        return st.complete and g.takes(min(backend.eos_ids))
    finally:
        g.close()


@pytest.mark.parametrize("syntax", [s.name for s in SYNTAXES])
def test_random_prefixes_of_every_recorded_tool_complete_as_llama_cpp_agrees(llama_backend, syntax):
    """From random points of calls to the tools real agents and MCP servers send, the walker's shortest
    completion is one llama.cpp's grammar takes to its end: the walker follows the same grammar."""
    rng = random.Random(syntax)
    for i, t in enumerate(RECORDED):
        plan = ToolPlan(syntax_by_name(syntax), (t, RECORDED[(i + 1) % len(RECORDED)]), "required")
        gbnf = plan.grammar()
        w = walk_for(gbnf)
        for chars in (0, rng.randint(5, 60), rng.randint(60, 200)):
            prefix = random_prefix(w, rng, chars)
            st = w.feed(w.start(), prefix.encode())
            assert st is not None
            rest = w.shortest(st)
            assert rest is not None and len(rest) == st.need
            assert llama_takes(llama_backend, gbnf, prefix.encode() + rest), (syntax, t.name, prefix, rest)


def test_the_walker_refuses_what_llama_cpp_refuses(llama_backend):
    plan = ToolPlan(syntax_by_name("hermes"), TOOLS, "required", parallel=False)
    gbnf = plan.grammar()
    w = walk_for(gbnf)
    for bad in ('<tool_call>\n{"name": "nope"', '<tool_call>\n{"name": "convert", "arguments": {"value": x',
                '<tool_call>\n{"name": "get_weather", "arguments": {"unit": "kelvin"'):
        assert w.feed(w.start(), bad.encode()) is None
        assert not llama_takes(llama_backend, gbnf, bad.encode())


def test_references_and_repetitions_keep_few_stacks():
    """A counted repetition is one frame with a count: 2,000 characters into a string leave as few
    stacks as 2 do."""
    w = walk_of('root ::= "\\"" [a-z]{0,2048} "\\"" "!"\n')
    short = w.feed(w.start(), b'"ab')
    long_ = w.feed(w.start(), b'"' + b"a" * 2000)
    assert short is not None and long_ is not None and len(short.stacks) == len(long_.stacks) == 2
    assert w.shortest(long_) == b'"!'
    assert REF != CHAR != REP
