"""The transformers backend: invariants on a tiny random Llama, refusals, quantization,
and the bundled model on both backends."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tiny_hf import make_tiny_model  # noqa: E402

from engine.backends.base import Backend  # noqa: E402
from engine.decode.detokenize import IncrementalDetokenizer  # noqa: E402
from engine.engine import Engine
from engine.config import EngineConfig  # noqa: E402
from engine.errors import HearthError, ModelFileError, UnsupportedModelError  # noqa: E402
from engine.prompt.messages import Message
from engine.types import SamplingParams  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TEXT = "Héllo wörld, naïve café! 😀 你好 ∑ the lighthouse keeper\n\ttabs  and  spaces"
A = list(range(40, 64))      # 24 prompt-ish tokens
B = [70, 71, 72, 73, 74, 75, 76, 77, 78, 79]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-llama")


@pytest.fixture(scope="module")
def hfb(tiny_dir):
    from engine.backends import hf

    b = hf.load(tiny_dir, device="cpu", n_threads=1)
    yield b
    b.close()


def close(a, b):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    assert (np.argmax(a, axis=-1) == np.argmax(b, axis=-1)).all()


# -- the protocol and its invariants ----------------------------------------------------

def test_implements_the_backend_protocol(hfb):
    assert isinstance(hfb, Backend)
    assert hfb.name == "hf" and hfb.n_vocab == 400 and hfb.n_ctx == 512
    assert hfb.eos_ids == frozenset({hfb.tok.eos_token_id})
    assert "<|im_start|>" in hfb.chat_template
    assert (hfb.bos_token, hfb.eos_token) == ("<|endoftext|>", "<|im_end|>")
    assert hfb.kv_len == 0


def test_forward_shapes_and_kv_len(hfb):
    hfb.truncate(0)
    last = hfb.forward(A)
    assert last.shape == (400,) and last.dtype == np.float32 and hfb.kv_len == len(A)
    rows = hfb.forward(B, all_logits=True)
    assert rows.shape == (len(B), 400) and hfb.kv_len == len(A) + len(B)
    with pytest.raises(ValueError):
        hfb.forward([])
    hfb.truncate(0)


def test_truncate_then_forward_equals_fresh(hfb):
    hfb.truncate(0)
    fresh = hfb.forward(A + B, all_logits=True)
    hfb.truncate(0)
    hfb.forward(A)
    hfb.forward([5, 6, 7, 8, 9])     # rejected "draft" tokens
    hfb.truncate(len(A))
    assert hfb.kv_len == len(A)
    close(hfb.forward(B, all_logits=True), fresh[len(A):])
    hfb.truncate(3)
    close(hfb.forward(A[3:] + B, all_logits=True), fresh[3:])
    hfb.truncate(0)


def test_all_logits_rows_match_one_step_at_a_time(hfb):
    hfb.truncate(0)
    rows = hfb.forward(A, all_logits=True)
    hfb.truncate(0)
    steps = [hfb.forward([t]).copy() for t in A]
    close(rows, np.stack(steps))
    hfb.truncate(0)


def test_chunked_prefill_equals_one_pass(hfb):
    hfb.truncate(0)
    whole = hfb.forward(A + B, all_logits=True)
    last = hfb.forward([3]).copy()
    hfb.truncate(0)
    hfb.prefill_chunk = 7
    try:
        close(hfb.forward(A + B, all_logits=True), whole)
        hfb.truncate(0)
        hfb.forward(A + B)
        close(hfb.forward([3]), last)
    finally:
        hfb.prefill_chunk = 512
        hfb.truncate(0)


def test_snapshot_restore_equals_fresh(hfb):
    hfb.truncate(0)
    hfb.forward(A)
    snap = hfb.snapshot()
    assert snap.n_tokens == len(A) and hfb.nbytes(snap) == 2 * 2 * 2 * len(A) * 16 * 4
    expect = hfb.forward(B, all_logits=True).copy()
    hfb.forward([1, 2, 3])
    for _ in range(2):  # a restore must not change the snapshot itself
        hfb.restore(snap)
        assert hfb.kv_len == len(A)
        close(hfb.forward(B, all_logits=True), expect)
    hfb.restore(hfb.snapshot().__class__(0, []))
    assert hfb.kv_len == 0


def test_snapshots_live_in_host_ram_and_restore_onto_the_cache_device(hfb, tiny_dir):
    """The sizing plan counts prefix snapshots in RAM, so they must not stay on the GPU;
    checked on the CPU always, and on CUDA too where there is a GPU."""
    import torch

    from engine.backends import hf

    backends = [(hfb, False)]
    if torch.cuda.is_available():
        backends.append((hf.load(tiny_dir, device="gpu"), True))
    for b, owned in backends:
        b.truncate(0)
        b.forward(A)
        snap = b.snapshot()
        expect = b.forward(B, all_logits=True).copy()
        live = b._cache.layers[0].keys
        assert all(t.device.type == "cpu" for kv in snap.layers for t in kv) and len(snap.layers) == 2
        assert all(t.data_ptr() != live.data_ptr() for kv in snap.layers for t in kv)  # a copy, never a view
        b.truncate(0)
        b.restore(snap)
        assert {layer.keys.device for layer in b._cache.layers} == {live.device}
        np.testing.assert_array_equal(b.forward(B, all_logits=True), expect)
        loaded = b.state_from_bytes(len(A), bytearray(b.state_bytes(snap)))
        assert all(t.device.type == "cpu" for kv in loaded.layers for t in kv)
        b.truncate(0)
        b.restore(loaded)
        np.testing.assert_array_equal(b.forward(B, all_logits=True), expect)
        b.truncate(0)
        if owned:
            b.close()


def test_state_bytes_round_trip_and_rejects_foreign_bytes(hfb):
    hfb.truncate(0)
    hfb.forward(A)
    snap = hfb.snapshot()
    expect = hfb.forward(B, all_logits=True).copy()
    data = bytearray(hfb.state_bytes(snap))
    assert b"pickle" not in data[:200] and data[8:9] == b"{"   # safetensors header, no pickle
    hfb.truncate(0)
    hfb.restore(hfb.state_from_bytes(len(A), data))
    close(hfb.forward(B, all_logits=True), expect)
    with pytest.raises(HearthError):
        hfb.state_from_bytes(len(A) + 1, data)
    with pytest.raises(HearthError):
        hfb.state_from_bytes(len(A), bytearray(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!"))
    assert hfb.state_identity()["backend"] == "hf"
    hfb.truncate(0)


def test_context_full_leaves_the_cache_intact(tiny_dir):
    from engine.backends import hf

    b = hf.load(tiny_dir, device="cpu", n_ctx=32)
    b.forward(A)
    with pytest.raises(hf.ContextFullError):
        b.forward(B)
    assert b.kv_len == len(A)
    b.close()


@pytest.mark.parametrize("start", [0, len(A)])
def test_a_forward_that_fails_inside_the_model_leaves_every_layer_as_it_was(hfb, start):
    """A failure in the second layer comes after the first one stored the new tokens;
    the rollback must cut both to the old length (a relative crop left them 2 apart, and
    the next forward failed on mismatched attention sizes)."""
    hfb.truncate(0)
    if start:
        hfb.forward(A[:start])
    expect = hfb.forward((A + B)[start:], all_logits=True).copy()  # the same call as after the failure
    hfb.truncate(start)

    def boom(module, args):
        raise RuntimeError("boom")

    hook = hfb.model.model.layers[1].register_forward_pre_hook(boom)
    try:
        with pytest.raises(RuntimeError, match="boom"):
            hfb.forward([5, 6])
    finally:
        hook.remove()
    assert hfb.kv_len == start and [layer.get_seq_length() for layer in hfb._cache.layers] in ([], [start] * 2)
    np.testing.assert_array_equal(hfb.forward((A + B)[start:], all_logits=True), expect)
    hfb.truncate(0)


def test_memory_report_counts_weights_and_kv(hfb):
    hfb.truncate(0)
    hfb.forward(A)
    rep = hfb.memory_report()
    n_params = sum(p.numel() for p in hfb.model.parameters())
    assert rep["weights"] == rep["weights@cpu"] >= n_params * 4
    assert rep["kv"] >= 2 * 2 * 2 * len(A) * 16 * 4 and rep["kv@cpu"] == rep["kv"]
    hfb.truncate(0)


# -- what the backend says about itself ------------------------------------------------

TINY_WEIGHT_BYTES = 4 * (2 * 400 * 64 + 2 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128 + 2 * 64) + 64)


def test_describe_names_source_quant_runtime_device_and_size(hfb, tiny_dir):
    from engine.backends.base import BackendInfo

    assert TINY_WEIGHT_BYTES == 500992 == sum(p.numel() * 4 for p in hfb.model.parameters())
    assert hfb.describe() == BackendInfo(backend="hf", name="tiny-llama", path=str(tiny_dir), quant="float32",
                                         runtime="torch-cpu", device="cpu", threads=1, n_ctx=512,
                                         n_gpu_layers=0, kv_type="float32", weight_bytes=TINY_WEIGHT_BYTES)
    assert hfb.add_bos is False  # the tokenizer has a BOS token but does not prepend it


def test_vocab_is_the_tokenizers_id_to_token_table(hfb, tiny_dir):
    v = hfb.vocab()
    assert (v.name, v.tokenizer_model, v.weight_bytes, v.path) == \
        (str(tiny_dir), f"hf-{type(hfb.tok).__name__}", TINY_WEIGHT_BYTES, "")
    assert len(v.tokens) == 400 and v.tokens[:3] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    assert v.tokens == [hfb.tok.convert_ids_to_tokens(i) for i in range(400)]


def test_open_draft_loads_another_model_with_the_same_context(tiny_dir):
    from engine.backends import hf

    b = hf.load(tiny_dir, device="cpu", n_ctx=32)
    d = b.open_draft(str(tiny_dir))
    try:
        assert isinstance(d, hf.HFBackend) and d is not b and d.n_ctx == 32
        assert d.describe().path == str(tiny_dir.resolve()) and d.vocab() == b.vocab()
        np.testing.assert_array_equal(d.forward(A), b.forward(A))  # the same weights, the same logits
    finally:
        d.close()
        b.close()


def test_a_gguf_source_describes_and_vocabs_from_its_header(bundled_path):
    from engine.backends import hf
    from engine.models.gguf import model_info

    info = model_info(bundled_path)
    b = hf.load(bundled_path, device="cpu", n_ctx=256)
    try:
        d = b.describe()
        assert (d.name, d.path, d.quant, d.runtime, d.device, d.n_ctx) == \
            (info.name, str(bundled_path), "float32", "torch-cpu", "cpu", 256)
        assert b.vocab() == info.vocab() and b.vocab().weight_bytes == info.weight_bytes > 0
    finally:
        b.close()


# -- tokens -------------------------------------------------------------------------------

@pytest.mark.parametrize("style", ["bytelevel", "spm"])
def test_token_bytes_reassemble_text_exactly(style, tiny_dir, tmp_path):
    from engine.backends import hf

    folder = tiny_dir if style == "bytelevel" else make_tiny_model(tmp_path / "spm", style="spm")
    b = hf.load(folder, device="cpu")
    assert b._kind == style
    ids = b.tokenize(TEXT, special=False)
    assert b"".join(b.token_bytes(t) for t in ids) == TEXT.encode("utf-8")
    # The shared detokenizer streams it back without a single replacement character.
    det = IncrementalDetokenizer(b.token_bytes)
    out = "".join(det.push(t) for t in ids) + det.flush()
    assert out == TEXT
    # Control tokens are parsed from text when asked, and print nothing.
    ctl = b.tokenize("<|im_start|>user\nhi<|im_end|>", special=True)
    assert ctl[0] == b.tok.convert_tokens_to_ids("<|im_start|>") and b.token_bytes(ctl[0]) == b""
    assert b.tokenize("<|im_start|>", special=False) != ctl[:1]
    assert b.tokenize("hi", add_bos=True)[0] == b.tok.bos_token_id
    b.close()


# -- through the Engine ---------------------------------------------------------------------

def test_engine_streams_with_the_shared_loop_and_prefix_reuse(tiny_dir):
    eng = Engine.open(EngineConfig(str(tiny_dir), n_ctx=512, cache_budget=0))
    assert eng.backend.name == "hf" and eng.model.kind == "hf_dir"
    msgs = [Message("system", "You are terse."), Message("user", "the sea")]
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    finals = []
    for _ in range(2):
        eng.reset()
        *deltas, final = list(eng.stream(msgs, params))
        assert "".join(d.text for d in deltas) == final.text
        finals.append(final)
    assert finals[0].token_ids == finals[1].token_ids and len(finals[0].token_ids) == 12
    # Next turn: the KV of the first turn is reused, and the output equals a cold run.
    msgs2 = msgs + [Message("assistant", finals[0].text), Message("user", "more")]
    warm = list(eng.stream(msgs2, params))[-1]
    assert warm.stats.cached_tokens > len(eng.prompt_tokens(msgs)) // 2
    eng.reset()
    cold = list(eng.stream(msgs2, params))[-1]
    assert cold.stats.cached_tokens == 0 and cold.token_ids == warm.token_ids
    eng.close()


# -- refusals and bad choices ----------------------------------------------------------------

def test_refuses_pickled_weights_unless_allowed(tiny_dir, tmp_path):
    import torch
    from safetensors.torch import load_file

    d = tmp_path / "pickled"
    d.mkdir()
    for f in tiny_dir.iterdir():
        if f.name != "model.safetensors":
            (d / f.name).write_bytes(f.read_bytes())
    torch.save(load_file(tiny_dir / "model.safetensors"), d / "pytorch_model.bin")
    with pytest.raises(UnsupportedModelError, match="pickle") as e:
        Engine.open(EngineConfig(str(d)))
    assert "arbitrary code" in str(e.value)
    eng = Engine.open(EngineConfig(str(d), allow_pickle=True, cache_budget=0))
    assert eng.backend.forward(A).shape == (400,)
    eng.close()


def test_refuses_remote_code_unless_allowed(tiny_dir, tmp_path):
    d = tmp_path / "custom"
    d.mkdir()
    for f in tiny_dir.iterdir():
        (d / f.name).write_bytes(f.read_bytes())
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(model_type="hearth_frobnicator",
               auto_map={"AutoConfig": "frob.FrobConfig", "AutoModelForCausalLM": "frob.FrobModel"})
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "frob.py").write_text("raise SystemExit('remote code ran')\n")
    with pytest.raises(UnsupportedModelError, match="trust_remote_code") as e:
        Engine.open(EngineConfig(str(d)))
    assert "own Python code" in str(e.value)


def test_clear_errors_for_bad_choices(tiny_dir, tmp_path, bundled_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "config.json").write_text("{}")
    with pytest.raises(ModelFileError, match="no model weights"):
        Engine.open(EngineConfig(str(tmp_path / "empty")))
    (tmp_path / "notes").mkdir()
    with pytest.raises(ModelFileError, match="config.json"):
        Engine.open(EngineConfig(str(tmp_path / "notes")))
    with pytest.raises(HearthError, match="unknown quantization"):
        Engine.open(EngineConfig(str(tiny_dir), quant="int3"))
    with pytest.raises(HearthError, match="llama.cpp backend needs a .gguf"):
        Engine.open(EngineConfig(str(tiny_dir), backend="llama_cpp"))
    with pytest.raises(HearthError, match="transformers-backend choices"):
        Engine.open(EngineConfig(bundled_path, quant="int4"))
    with pytest.raises(HearthError, match="unknown backend"):
        Engine.open(EngineConfig(str(tiny_dir), backend="vllm"))
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(HearthError, match="no CUDA GPU"):
            Engine.open(EngineConfig(str(tiny_dir), device="gpu"))
    q = tmp_path / "prequant"
    q.mkdir()
    for f in tiny_dir.iterdir():
        (q / f.name).write_bytes(f.read_bytes())
    cfg = json.loads((q / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "gptq", "bits": 4}
    (q / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(HearthError, match="already quantized"):
        Engine.open(EngineConfig(str(q), quant="int8"))


def test_cli_error_is_one_line(tiny_dir):
    r = subprocess.run([sys.executable, "-m", "engine", "bench", "quality", "--backend", "llama_cpp",
                        "--model", str(tiny_dir), "--json"], capture_output=True, text=True, cwd=ROOT,
                       timeout=120)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "needs a GGUF" in r.stderr


# -- quantization ------------------------------------------------------------------------------

@pytest.mark.parametrize("quant,layer", [("int8", "Linear8bitLt"), ("int4", "Linear4bit")])
def test_bitsandbytes_quantization_on_cpu(tiny_dir, hfb, quant, layer):
    pytest.importorskip("bitsandbytes")
    from engine.backends import hf

    b = hf.load(tiny_dir, device="cpu", quant=quant)
    kinds = {type(m).__name__ for m in b.model.modules()}
    assert layer in kinds
    if quant == "int4":  # NF4 with double quantization, computing in float32 on the CPU
        qc = b.model.config.quantization_config
        qc = qc if isinstance(qc, dict) else qc.to_dict()
        assert qc["bnb_4bit_quant_type"] == "nf4" and qc["bnb_4bit_use_double_quant"]
        assert "float32" in str(qc["bnb_4bit_compute_dtype"])
    assert b.memory_report()["weights"] < hfb.memory_report()["weights"]
    b.forward(A)
    snap = b.snapshot()
    expect = b.forward(B, all_logits=True).copy()
    b.restore(snap)
    close(b.forward(B, all_logits=True), expect)
    assert b.state_identity()["quant"] == quant
    b.close()


# -- imports ------------------------------------------------------------------------------------

def test_gguf_path_never_imports_torch(bundled_path):
    code = ("import sys\n"
            "import engine, engine.models.hub, engine.bench\n"
            "from engine.engine import Engine\n"
            "from engine.config import EngineConfig\n"
            "from engine.models.catalogue import resolve\n"
            "assert resolve('Qwen/Qwen2.5-0.5B-Instruct').kind == 'hub'\n"
            f"e = Engine.open(EngineConfig({str(bundled_path)!r}, n_ctx=256))\n"
            "e.close()\n"
            "bad = [m for m in ('torch', 'transformers', 'huggingface_hub') if m in sys.modules]\n"
            "assert not bad, bad\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


# -- the bundled model on both backends ---------------------------------------------------------

def test_bundled_model_agrees_across_backends(engine):
    """Greedy 32 tokens: llama.cpp on the Q4_1 file vs transformers on its dequantized weights.

    Measured on 11 prompts (the three below and the quality prompt set):
    5 agree on >= 16 tokens (4 of them on all 32); the other 6 part at token
    0, 1, 2, 2, 2 or 7 (20 for one more). The two numeric paths differ by
    0.7-0.9 logits per position (max over the vocabulary; llama.cpp multiplies
    Q4_1 weights with 8-bit-quantized activations, transformers uses the
    float32 weights), and every parting is at a near-tie whose top-2 gap is
    0.006-0.27 logits on the transformers side, below that noise; both
    backends score the same text alike (perplexity 28.65 vs 28.46). So the
    test demands >= 16 on a prompt without such a tie, and checks the reason
    on one that has one.
    """
    hf_engine = Engine.open(EngineConfig(None, backend="hf", n_ctx=1024, cache_budget=0))
    params = SamplingParams(temperature=0.0, max_tokens=32, ignore_eos=True)

    def both(text):
        q = [Message("user", text)]
        assert hf_engine.prompt_tokens(q) == engine.prompt_tokens(q)
        engine.reset()
        hf_engine.reset()
        ref = list(engine.stream(q, params))[-1].token_ids
        got = list(hf_engine.stream(q, params))[-1].token_ids
        return q, ref, next((i for i, (x, y) in enumerate(zip(ref, got)) if x != y), 32)

    _, _, agree = both("Name three colours of the rainbow.")
    assert agree >= 16

    q, ref, agree = both("Write a haiku about the sea.")
    if agree < 16:  # the documented reason: they part where the top two tokens nearly tie
        seq = engine.prompt_tokens(q) + ref
        n0 = len(seq) - len(ref)
        rows = []
        for e in (engine, hf_engine):
            e.reset()
            rows.append(np.array(e.backend.forward(seq, all_logits=True)[n0 - 1:-1]))
            e.reset()
        ll, lh = rows
        noise = float(np.abs(ll - lh).max(axis=1).mean())
        k = next(i for i in range(len(ref)) if ll[i].argmax() != lh[i].argmax())
        gaps = [float(np.diff(np.sort(r[k])[-2:])[0]) for r in (ll, lh)]
        assert k <= agree and max(gaps) < noise / 2, (k, gaps, noise)
    hf_engine.close()


def test_an_image_for_the_transformers_backend_says_it_needs_a_gguf_with_its_projector(hfb):
    from engine.engine import Engine
    from engine.errors import NoVisionError
    from engine.prompt.messages import ImagePart, Message, TextPart
    from engine.types import SamplingParams

    e = Engine(hfb)
    msg = Message.of("user", ImagePart("a" * 64, "image/png", b"not read"), TextPart("hi"))
    with pytest.raises(NoVisionError, match="images need a GGUF model with its projector"):
        list(e.stream([msg], SamplingParams(max_tokens=2)))
