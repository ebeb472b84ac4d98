"""Automatic sizing: the memory model, the planner and its give-up order, the
reviewed table and model references. The CLI, the reality check and the
out-of-memory retry are tests/test_sizing_reality.py.

Planner tests run on JSON fixtures of real architectures (no weights; see
tests/fixtures/sizing/make_fixtures.py) on simulated machines. The reality
tests load real GGUFs with llama.cpp on the CPU and compare the predicted KV
and compute buffers with the ones llama.cpp reports.
"""
from __future__ import annotations

import importlib.util
import itertools
import json
import struct
from pathlib import Path

import pytest

from engine.errors import HearthError
from engine.sizing.hardware import GiB, MiB, Hardware, simulated
from engine.sizing.memory import MARGIN, Config, estimate, kv_cells, kv_layer_bytes
from engine.sizing.plan import STATUS_FITS, STATUS_NO, STATUS_OFFLOAD, Choices, plan_for
from engine.sizing.report import plan_dict, reasons, render_table
from engine.sizing.search import Search
from engine.sizing.resolve import Resolved, find_known, known_models, resolve_spec
from engine.sizing.shape import ModelSpec, gguf_spec, spec_from_gguf, specs_from_hf_dir

HERE = Path(__file__).parent / "fixtures" / "sizing"
_spec = importlib.util.spec_from_file_location("make_fixtures", HERE / "make_fixtures.py")
mf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mf)

FIXTURES = {stem: (spec, known) for stem, spec, known in mf.fixture_specs()}
MACHINES = dict(mf.machines())


def fixture(stem: str) -> tuple[ModelSpec, object]:
    spec, known = FIXTURES[stem]
    return ModelSpec.from_dict(spec.to_dict()), known


def plan_fixture(stem: str, machine: str, **choices) -> object:
    spec, known = fixture(stem)
    hw = MACHINES[machine] if isinstance(machine, str) else machine
    return plan_for(Resolved([spec], "fixture", known=known, explicit_quant=True), hw, Choices(**choices))


# -- fixtures and the memory model ---------------------------------------------------------

def test_every_size_and_quantization_has_a_fixture():
    sizes = {"qwen2.5-0.5b-instruct", "qwen2.5-1.5b-instruct", "qwen2.5-7b-instruct",
             "llama-3.1-8b-instruct", "qwen2.5-14b-instruct"}
    quants = {"Q4_K_M.gguf", "Q8_0.gguf", "F16.gguf", "none.hf", "int8.hf", "int4.hf"}
    assert set(FIXTURES) == {f"{s}.{q}" for s in sizes for q in quants}


def test_fixtures_and_catalogue_are_what_the_generator_writes():
    """Edit make_fixtures.py and re-run it; never the JSON by hand."""
    for stem, (spec, _) in FIXTURES.items():
        assert spec.to_dict() in mf.variants(spec.source), stem
    cat = {m.id: m for m in known_models()}
    for mid, *_ in mf.CATALOGUE:
        assert [v.to_dict() for v in cat[mid].variants] == mf.variants(mid)


def test_published_download_sizes():
    """Q4_K_M files as published: Qwen2.5-7B 4.68 GB, Llama-3.1-8B 4.92 GB, Qwen2.5-14B 8.99 GB."""
    for stem, gb in (("qwen2.5-7b-instruct.Q4_K_M.gguf", 4.68), ("llama-3.1-8b-instruct.Q4_K_M.gguf", 4.92),
                     ("qwen2.5-14b-instruct.Q4_K_M.gguf", 8.99), ("llama-3.1-8b-instruct.Q8_0.gguf", 8.54)):
        assert fixture(stem)[0].weight_bytes / 1e9 == pytest.approx(gb, rel=0.02), stem


@pytest.mark.parametrize("name", ["qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"])
def test_synthetic_q4_k_m_matches_the_real_file(name):
    """The generator's Q4_K_M mix reproduces the real Qwen2.5-Coder files byte for byte."""
    from engine.models.catalogue import model_dir

    path = model_dir() / name
    assert path.is_file(), f"{name} is not here: scripts/test.sh fetches it (python -m engine models fetch-bench-pair)"
    real = spec_from_gguf(path)
    arch = mf.ARCHS["qwen2.5-0.5b" if "0.5b" in name else "qwen2.5-1.5b"]
    synth = gguf_spec(mf.gguf_meta(arch, "x", "Q4_K_M"), mf.gguf_tensors(arch, "Q4_K_M"))
    assert synth.weight_bytes == real.weight_bytes
    assert (synth.input_bytes, synth.output_bytes) == (real.input_bytes, real.output_bytes)
    assert sorted(synth.layer_bytes) == sorted(real.layer_bytes)


def test_gguf_spec_agrees_with_model_info(bundled_path):
    from engine.models.gguf import model_info

    spec, info = spec_from_gguf(bundled_path), model_info(bundled_path)
    assert spec.layer_bytes == info.layer_bytes and spec.weight_bytes == info.weight_bytes
    assert (spec.n_layers, spec.n_kv_heads, spec.head_dim, spec.n_ctx_train) == (30, 3, 64, 8192)
    assert spec.quant == "Q4_1" and spec.tied_output and spec.output_bytes == spec.input_bytes - 576 * 4


def test_kv_cache_formula_handles_gqa_and_padding():
    spec, _ = fixture("llama-3.1-8b-instruct.Q4_K_M.gguf")
    # 2 (K and V) x 32 layers x 8 KV heads x 128 x 2 bytes = 128 KiB per token, not 32 heads' 512 KiB.
    assert spec.kv_bytes_per_token(2.0) == 2 * 32 * 8 * 128 * 2
    assert kv_cells(1000) == 1024 and kv_cells(8192) == 8192
    assert kv_layer_bytes(spec, 8192, "q8_0") == 8192 * 8 * 256 * 34 // 32
    cfg = Config(spec, 1000, 0, "f16")
    assert estimate(cfg, simulated("none", "64GiB", cores=8)).parts["kv"] == 1024 * 2 * 32 * 8 * 128 * 2


def test_partial_offload_is_costed_per_layer():
    spec, _ = fixture("qwen2.5-14b-instruct.Q4_K_M.gguf")
    hw = simulated("24GiB", "64GiB", cores=8)
    n = spec.n_layers
    by_k = {k: estimate(Config(spec, 8192, k, "f16"), hw) for k in (0, 10, n, n + 1)}
    # llama.cpp counts n + 1 positions (the blocks, then the head) and offloads the *last* k of them
    # (llama-model.cpp: i_gpu_start = n_layer + 1 - n_gpu_layers): the head and k - 1 blocks,
    # as measured on lavapipe (tests/test_device_vulkan.py).
    for k in (10, n):
        assert by_k[k].gpus[0].weights == sum(spec.layer_bytes[n - k + 1:]) + spec.output_bytes
        assert by_k[k].ram.weights == spec.input_bytes + sum(spec.layer_bytes[:n - k + 1])
        assert by_k[k].gpus[0].kv == (k - 1) * kv_layer_bytes(spec, 8192, "f16")
        assert by_k[k].gpus[0].layers == k - 1 and by_k[k].ram.layers == n - k + 1
    assert by_k[n + 1].gpus[0].weights == sum(spec.layer_bytes) + spec.output_bytes
    assert by_k[n + 1].ram.weights == spec.input_bytes  # the embedding never leaves RAM
    assert by_k[0].gpus[0].total == 0


def test_tied_head_is_copied_to_the_gpu_only_when_offloaded(bundled_path):
    spec = spec_from_gguf(bundled_path)
    hw = simulated("8GiB", "16GiB", cores=8)
    full = estimate(Config(spec, 2048, spec.n_layers + 1, "f16"), hw)
    assert full.gpus[0].weights == sum(spec.layer_bytes) + spec.output_bytes
    assert full.ram.weights == spec.input_bytes
    cpu = estimate(Config(spec, 2048, 0, "f16"), simulated("none", "16GiB", cores=8))
    assert cpu.ram.weights == spec.weight_bytes


def test_margin_is_ten_percent_of_each_pool():
    p = plan_fixture("qwen2.5-7b-instruct.Q4_K_M.gguf", "GPU  8 GiB")
    for pool in p.breakdown.pools:
        assert pool.margin == int(pool.subtotal * MARGIN)
        assert pool.total == pool.subtotal + pool.margin
    assert 0.10 <= MARGIN <= 0.15


# -- the planner on every fixture and machine --------------------------------------------

ALL = [(stem, m) for stem in sorted(FIXTURES) for m in MACHINES]


@pytest.mark.parametrize("stem,machine", ALL)
def test_every_plan_respects_its_budget_and_is_sensible(stem, machine):
    p = plan_fixture(stem, machine)
    spec, hw = p.spec, p.hardware
    assert p.status in (STATUS_FITS, STATUS_OFFLOAD, STATUS_NO)
    if p.fits:
        for pool in p.breakdown.pools:
            assert pool.total <= pool.available, (pool.name, pool.total, pool.available)
    assert 2048 <= p.n_ctx <= min(spec.n_ctx_train, 32768)
    assert p.n_ctx % 256 == 0
    if not hw.gpus:
        assert p.n_gpu_layers == 0 and p.status != STATUS_OFFLOAD
    if p.status == STATUS_FITS and hw.gpus:
        assert p.config.all_on_gpu or (spec.format == "hf" and p.n_gpu_layers >= spec.n_layers)
    if p.status == STATUS_OFFLOAD:
        assert hw.gpus and sum(g.layers for g in p.breakdown.gpus) < spec.n_layers + (spec.format == "gguf")
    if p.status == STATUS_NO:  # the smallest configuration was tried, and what would fit is said
        assert p.n_ctx == 2048 and p.prefix_cache == 0 and p.config.draft is None and p.alternatives
    assert set(reasons(p)) == {"quant", "context", "gpu_layers", "kv", "draft", "prefix_cache"}
    for value, why in reasons(p).values():
        assert value and why and "\n" not in why
    text = render_table(p)
    assert "total" in text and "available" in text and p.status in text
    json.dumps(plan_dict(p))


def test_the_reviewed_table_is_unchanged():
    """tests/fixtures/sizing/reviewed_plans.txt holds every plan above, reviewed by
    hand. If the planner changes on purpose, re-render it with
    `make_fixtures.py --plans`, review the diff and update the reasoning."""
    reviewed = mf.REVIEWED.read_text().split(mf.MARKER)[1].strip("\n")
    assert mf.render_plans().strip("\n") == reviewed


@pytest.mark.parametrize("stem,machine,status,min_ctx", [
    ("qwen2.5-7b-instruct.Q4_K_M.gguf", "GPU  8 GiB", STATUS_FITS, 8192),
    ("qwen2.5-7b-instruct.Q4_K_M.gguf", "GPU  6 GiB", STATUS_FITS, 8192),
    ("llama-3.1-8b-instruct.Q4_K_M.gguf", "GPU  8 GiB", STATUS_FITS, 8192),
    ("qwen2.5-14b-instruct.Q4_K_M.gguf", "GPU 12 GiB", STATUS_FITS, 8192),
    ("qwen2.5-14b-instruct.Q4_K_M.gguf", "GPU  8 GiB", STATUS_OFFLOAD, 8192),
    ("qwen2.5-14b-instruct.F16.gguf", "GPU 24 GiB", STATUS_OFFLOAD, 8192),
    ("qwen2.5-7b-instruct.F16.gguf", "GPU 16 GiB", STATUS_FITS, 8192),
    ("qwen2.5-0.5b-instruct.F16.gguf", "GPU  6 GiB", STATUS_FITS, 32768),
    ("qwen2.5-1.5b-instruct.Q8_0.gguf", "CPU  8 GiB", STATUS_FITS, 32768),
    ("llama-3.1-8b-instruct.Q4_K_M.gguf", "CPU  8 GiB", STATUS_FITS, 8192),
    ("qwen2.5-14b-instruct.Q4_K_M.gguf", "CPU 16 GiB", STATUS_FITS, 8192),
    ("qwen2.5-14b-instruct.Q4_K_M.gguf", "CPU  8 GiB", STATUS_NO, 0),
    ("qwen2.5-7b-instruct.Q8_0.gguf", "CPU  8 GiB", STATUS_NO, 0),
    ("qwen2.5-14b-instruct.F16.gguf", "CPU 16 GiB", STATUS_NO, 0),
    ("llama-3.1-8b-instruct.none.hf", "GPU 24 GiB", STATUS_FITS, 32768),
    ("qwen2.5-7b-instruct.int4.hf", "GPU  8 GiB", STATUS_FITS, 8192),
    ("qwen2.5-14b-instruct.none.hf", "GPU 24 GiB", STATUS_OFFLOAD, 8192),
    ("qwen2.5-7b-instruct.none.hf", "CPU 16 GiB", STATUS_NO, 0),  # float32 on the CPU: 28 GiB
])
def test_specific_expectations(stem, machine, status, min_ctx):
    p = plan_fixture(stem, machine)
    assert p.status == status, render_table(p)
    assert p.n_ctx >= min_ctx


def test_14b_f16_does_not_fit_a_24gib_gpu_without_offload():
    p = plan_fixture("qwen2.5-14b-instruct.F16.gguf", "GPU 24 GiB", n_gpu_layers=49)
    assert p.status == STATUS_NO and p.breakdown.gpus[0].total > 24 * GiB
    assert any("GPU layers on Auto" in a and "fits with offload" in a for a in p.alternatives)


def test_auto_quantization_picks_the_best_file_that_fits_fully_on_the_gpu():
    def quant(gpu):
        return plan_for("qwen2.5-7b-instruct", simulated(gpu, "32GiB", cores=8)).spec.quant
    assert [quant(g) for g in ("6GiB", "8GiB", "12GiB", "24GiB")] == ["Q4_K_M", "Q4_K_M", "Q8_0", "F16"]
    p = plan_for("qwen2.5-7b-instruct", simulated("8GiB", "32GiB", cores=8))
    assert reasons(p)["quant"][1].startswith("Q8_0 would need") and p.config.all_on_gpu


def test_auto_never_goes_below_four_bits_it_offloads_instead():
    p = plan_for("qwen2.5-32b-instruct", simulated("8GiB", "64GiB", cores=8))
    assert p.spec.quant == "Q4_K_M" and p.status == STATUS_OFFLOAD


def test_transformers_quantization_and_placement():
    hw = simulated("8GiB", "32GiB", cores=8)
    p = plan_for("qwen2.5-7b-instruct", hw, Choices(quant="int4"))
    assert p.spec.format == "hf" and p.config_values()["backend"] == "hf"
    assert p.config_values()["device"] == "gpu" and p.config_values()["quant"] == "int4"
    off = plan_for("qwen2.5-14b-instruct", hw, Choices(quant="int4"))
    device, mm = off.hf_placement()
    assert device == "auto" and set(mm) == {0, "cpu"}
    assert mm[0] == off.breakdown.gpus[0].weights + max(off.spec.layer_bytes)
    assert any("float32" in n for n in off.notes)
    cpu = plan_for("qwen2.5-1.5b-instruct", simulated("none", "16GiB", cores=8), Choices(quant="none"))
    assert cpu.config_values()["device"] == "cpu" and cpu.kv_type == "f32"
    assert cpu.breakdown.ram.weights == 2 * cpu.spec.weight_bytes  # float32 on the CPU


def test_several_gpus_share_the_layers_by_free_memory():
    p = plan_for("llama-3.1-8b-instruct", simulated("12GiB,8GiB", "32GiB", cores=8))
    g0, g1 = p.breakdown.gpus
    assert p.status == STATUS_FITS and g0.layers > g1.layers > 0
    assert g0.layers + g1.layers == 32 and all(g.fits for g in p.breakdown.gpus)
    assert g1.compute > g0.compute  # the last GPU holds the output head and its logits
    # The load gets the plan's split as llama.cpp's tensor_split: positions per device, head on the last.
    assert p.tensor_split == (float(g0.positions), float(g1.positions))
    assert g0.positions == g0.layers and g1.positions == g1.layers + 1
    assert p.to_config().tensor_split == p.tensor_split
    one = plan_for("llama-3.1-8b-instruct", simulated("24GiB", "32GiB", cores=8))
    assert one.tensor_split is None  # one device: nothing to split


def test_rpc_workers_come_first_and_are_named_by_their_address():
    """llama.cpp puts RPC workers before local GPUs; a worker's pool says where it is, and its runtime is
    already running there, so only llama.cpp's pool is added on top of what it reports free."""
    from engine.sizing.hardware import GPU
    from engine.sizing.memory import GPU_OVERHEAD

    hw = Hardware((GPU(0, "10.0.0.5:50052", "rpc", 8 * GiB, 8 * GiB, device="RPC0[10.0.0.5:50052]"),
                   GPU(1, "NVIDIA RTX 4060", "nvidia", 8 * GiB, 8 * GiB, device="CUDA0")),
                  32 * GiB, 32 * GiB, 8, "simulated")
    p = plan_for("llama-3.1-8b-instruct", hw)
    w, g = p.breakdown.gpus
    assert w.name == "worker 10.0.0.5:50052" and g.name == "GPU 1"
    assert w.layers > 0 and g.layers > 0 and w.layers + g.layers == 32
    assert w.overhead == GPU_OVERHEAD["rpc"] < g.overhead
    assert p.tensor_split == (float(w.positions), float(g.positions))


def test_unified_memory_counts_the_gpu_share_against_ram():
    from engine.sizing.hardware import GPU

    mac = Hardware((GPU(0, "Apple GPU", "apple", int(10.67 * GiB), int(10.67 * GiB), unified=True),),
                   16 * GiB, 12 * GiB, 8, "simulated")
    p = plan_for("llama-3.1-8b-instruct", mac)
    assert p.fits and p.breakdown.ram.shared == p.breakdown.gpus[0].total
    assert p.breakdown.ram.total <= 12 * GiB and "GPU share" in render_table(p)


# -- the give-up order ---------------------------------------------------------------------

def _brute_force(search: Search) -> dict:
    """The lexicographically best fitting state over every combination of knobs."""
    order = search.ORDER
    best = None
    for combo in itertools.product(*(range(len(search.values[k])) for k in order)):
        st = {k: search.values[k][i] for k, i in zip(order, combo)}
        if search.estimate(st).fits:
            key = tuple(-i for i in combo)
            if best is None or key > best[0]:
                best = (key, st)
    return best[1] if best else None


@pytest.mark.parametrize("model,gpu,ram", [
    ("qwen2.5-7b-instruct", "6GiB", "32GiB"), ("qwen2.5-14b-instruct", "12GiB", "16GiB"),
    ("llama-3.1-8b-instruct", "none", "12GiB"), ("qwen2.5-1.5b-instruct", "4GiB", "8GiB"),
])
def test_the_search_gives_things_up_in_the_documented_order(model, gpu, ram):
    """The greedy search equals an exhaustive search for the best plan under the
    order ctx>=8k, GPU layers, quantization, KV type, ctx>8k, draft, prefix cache."""
    res = resolve_spec(model)
    variants = [v for v in sorted(res.variants, key=lambda s: -s.weight_bytes) if v.format == "gguf"]
    known = res.known
    draft = next(v for m in known_models() if m.id == known.draft for v in m.variants if v.quant == "Q4_K_M")
    hw = simulated(gpu, ram, cores=8)
    search = Search(variants, hw, Choices(), draft, draft_auto=True)
    if hw.gpus:  # keep the exhaustive search small: every 4th layer count, plus all and none
        n = variants[0].n_layers + 1
        search.values["gpu_layers"] = sorted({n, n - 1, *range(0, n, 4)}, reverse=True)
    expected = _brute_force(search)
    got = search.run()
    assert got == expected


def test_an_explicit_choice_is_kept_and_the_plan_says_what_would_fit():
    hw = MACHINES["CPU  8 GiB"]
    p = plan_fixture("llama-3.1-8b-instruct.Q4_K_M.gguf", hw, n_ctx=65536)
    assert p.n_ctx == 65536 and p.status == STATUS_NO
    assert reasons(p)["context"][1].startswith("your choice; it does not fit")
    assert any(a.startswith("with context on Auto: fits") for a in p.alternatives)
    assert "What would fit instead" in render_table(p)
    ok = plan_fixture("llama-3.1-8b-instruct.Q4_K_M.gguf", hw, n_ctx=4096, kv_type="q8_0", prefix_cache=0)
    assert (ok.n_ctx, ok.kv_type, ok.prefix_cache, ok.fits) == (4096, "q8_0", 0, True)
    assert reasons(ok)["kv"][1].endswith("your choice")


def test_does_not_fit_suggests_a_smaller_known_model():
    p = plan_for("qwen2.5-32b-instruct", simulated("none", "8GiB", cores=8))
    assert p.status == STATUS_NO
    assert any("largest known model that fits: llama-3.1-8b-instruct" in a for a in p.alternatives)


def test_draft_is_given_up_before_context_and_kept_when_there_is_room():
    small = plan_for("qwen2.5-7b-instruct", simulated("8GiB", "32GiB", cores=8))
    assert small.config.draft is None and small.n_ctx == 32768
    assert reasons(small)["draft"][1].startswith("dropped: Qwen2.5-0.5B-Instruct Q4_K_M would need")
    # On 16 GiB, Auto takes F16 (quantization ranks above the draft) and drops the draft;
    # with Q4_K_M fixed there is room for it, on the GPU beside the model.
    assert plan_for("qwen2.5-7b-instruct", simulated("16GiB", "32GiB", cores=8)).config.draft is None
    big = plan_for("qwen2.5-7b-instruct", simulated("16GiB", "32GiB", cores=8), Choices(quant="Q4_K_M"))
    assert big.config.draft is not None and big.breakdown.gpus[0].draft > 0 and big.n_ctx == 32768
    assert plan_for("qwen2.5-7b-instruct", simulated("16GiB", "32GiB", cores=8),
                    Choices(quant="Q4_K_M", draft="none")).config.draft is None


def test_the_draft_never_goes_to_another_machines_worker():
    """It runs every step: on a worker each step would cross the link. Beside a local GPU it goes there;
    with only workers, to RAM."""
    from engine.sizing.hardware import GPU

    worker = GPU(0, "10.0.0.5:50052", "rpc", 16 * GiB, 16 * GiB, device="RPC0[10.0.0.5:50052]")
    local = GPU(1, "simulated GPU", "simulated", 16 * GiB, 16 * GiB)
    both = plan_for("qwen2.5-7b-instruct", Hardware((worker, local), 32 * GiB, 32 * GiB, 8, "simulated"),
                    Choices(quant="Q4_K_M"))
    assert both.config.draft is not None
    assert both.breakdown.gpus[0].draft == 0 and both.breakdown.gpus[1].draft > 0
    alone = plan_for("qwen2.5-7b-instruct", Hardware((worker,), 32 * GiB, 32 * GiB, 8, "simulated"),
                     Choices(quant="Q4_K_M", n_gpu_layers=1 << 20))
    assert alone.breakdown.gpus[0].draft == 0 and (alone.config.draft is None or alone.breakdown.ram.draft > 0)


def test_prefix_cache_is_the_first_thing_given_up():
    p = plan_fixture("llama-3.1-8b-instruct.Q8_0.gguf", "CPU 16 GiB")
    assert p.n_ctx == 32768 and p.prefix_cache == 128 * MiB
    assert "first thing given up" in reasons(p)["prefix_cache"][1]


# -- model references ----------------------------------------------------------------

def test_catalogue_lookup_by_id_alias_and_repository():
    assert find_known("Qwen2.5-7B-Instruct")[0].id == "qwen2.5-7b-instruct"
    assert find_known("qwen2.5:7b")[0].id == "qwen2.5-7b-instruct"
    assert find_known("Qwen/Qwen2.5-7B-Instruct-GGUF")[1] == "gguf"
    assert find_known("https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct")[1] == "hf"
    assert find_known("no-such-model") is None
    with pytest.raises(HearthError, match="not a model Hearth knows"):
        resolve_spec("no-such-model")
    with pytest.raises(HearthError, match="no Q2_K variant"):
        plan_for("qwen2.5-7b-instruct", simulated("8GiB", "16GiB"), Choices(quant="Q2_K"))


def test_a_folder_of_ggufs_is_a_repository_to_choose_from(tmp_path, bundled_path):
    (tmp_path / "a.gguf").symlink_to(bundled_path)
    res = resolve_spec(tmp_path)
    assert res.where == "folder" and len(res.variants) == 1 and not res.explicit_quant


def _write_header_only_safetensors(path: Path, header: dict) -> None:
    meta, off = {}, 0
    for name, (dtype, shape) in header.items():
        n = 2
        for d in shape:
            n *= d
        meta[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    raw = json.dumps(meta).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + off)  # sparse: the size is right, no disk is used


def test_transformers_checkpoint_is_sized_from_config_and_safetensors_header(tmp_path):
    arch = mf.ARCHS["qwen2.5-7b"]
    (tmp_path / "config.json").write_text(json.dumps(mf.hf_config(arch)))
    header = mf.hf_header(arch)
    names = sorted(header)
    half = len(names) // 2
    _write_header_only_safetensors(tmp_path / "model-00001-of-00002.safetensors", {k: header[k] for k in names[:half]})
    _write_header_only_safetensors(tmp_path / "model-00002-of-00002.safetensors", {k: header[k] for k in names[half:]})
    specs = {s.quant: s for s in specs_from_hf_dir(tmp_path)}
    assert set(specs) == {"none", "int8", "int4"}
    for q, s in specs.items():
        assert s.to_dict() | {"source": "", "name": "", "download_bytes": 0} == \
            fixture(f"qwen2.5-7b-instruct.{q}.hf")[0].to_dict() | {"source": "", "name": "", "download_bytes": 0}
    assert specs["none"].weight_bytes == 2 * specs["none"].n_params == 2 * 7_615_616_512
    assert specs["int4"].weight_bytes < specs["int8"].weight_bytes < specs["none"].weight_bytes
    assert specs["none"].hf_modules == {"embed": "model.embed_tokens", "layers": "model.layers",
                                        "norm": "model.norm", "head": "lm_head"}
    (tmp_path / "bad.safetensors").write_bytes(b"\xff" * 8 + b"x")
    with pytest.raises(HearthError, match="not a safetensors file"):
        specs_from_hf_dir(tmp_path)


def test_the_draft_search_rules_out_big_files_by_their_size_before_reading_them(tmp_path, monkeypatch,
                                                                               bundled_path):
    # Every load looks for a draft in the models folder. Reading each big neighbour's header walked its
    # whole vocabulary under the GIL (54 ms per Qwen file here), and the window stalled while it loaded.
    import dataclasses
    import os

    import engine.sizing.drafts as drafts
    import engine.sizing.shape as shape
    from engine.models.gguf import model_info

    folder = tmp_path / "models"
    folder.mkdir()
    monkeypatch.setenv("HEARTH_MODEL_DIR", str(folder))
    (folder / "a-draft.gguf").symlink_to(bundled_path)
    with open(folder / "huge.gguf", "wb") as f:  # sparse: a 1 GiB file takes no disk
        f.truncate(1 << 30)
    (folder / "broken.gguf").write_bytes(b"GGUF" + os.urandom(64))
    target = dataclasses.replace(model_info(bundled_path).vocab(), path=str(folder / "target.gguf"),
                                 weight_bytes=400 << 20)
    read: list[str] = []
    real = shape.spec_from_gguf
    monkeypatch.setattr(shape, "spec_from_gguf", lambda p: read.append(os.path.basename(p)) or real(p))
    assert drafts.find_draft_for(target) == folder / "a-draft.gguf"
    assert sorted(read) == ["a-draft.gguf", "broken.gguf"]  # huge.gguf ruled out by its size alone
    assert drafts.draft_candidates(str(folder / "a-draft.gguf"), 400 << 20) == []  # never itself
    assert drafts.find_draft_for(dataclasses.replace(target, weight_bytes=100 << 20)) is None  # too big to draft
