"""Check that the installed llama-cpp-python works on this machine, in a subprocess.

    probe_llama.py MODEL.gguf          # the CPU path
    probe_llama.py MODEL.gguf --gpu    # every layer offloaded to the GPU runtime
    probe_llama.py MODEL.gguf --gpu --quick   # a build that passed before: the device is still there

Run by scripts/setup.py. A native build with the AMX kernels segfaults on some
CPUs as soon as a batch holds more than one token, so we decode a real 48-token
batch on the bundled model and then one token. With ``--gpu`` the probe also
fails unless ggml found a GPU device, llama.cpp put every layer on it, the
logits are finite, and the device's next token is among the CPU's top five for
the same batch (a broken kernel or driver gives garbage, not a near-tie).

Prints one JSON line ({"ok": true, "device": ..., ...}); exit 0 means usable.
"""
from __future__ import annotations

import ctypes
import importlib.util
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
N_BATCH = 48


def _devices():
    """engine/backends/llama/devices.py, by path: the engine is not installed yet on a first set-up."""
    path = ROOT / "engine" / "backends" / "llama" / "devices.py"
    spec = importlib.util.spec_from_file_location("_hearth_devices", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _fail(code: int, msg: str) -> int:
    print(json.dumps({"ok": False, "error": msg}))
    print(f"probe: {msg}", file=sys.stderr)
    return code


def _decode(lc, model, *, op_offload: bool) -> list[float] | str:
    """Logits of the last position of a 48-token batch, after one more single-token step."""
    cp = lc.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch = 256, 64, 64
    cp.op_offload = op_offload
    ctx = lc.llama_init_from_model(model, cp)
    if not ctx:
        return "could not create a context"
    batch = lc.llama_batch_init(N_BATCH, 0, 1)
    try:
        for i in range(N_BATCH):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = 100 + i, i, 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = i == N_BATCH - 1
        batch.n_tokens = N_BATCH
        if lc.llama_decode(ctx, batch) != 0:
            return "batch decode failed"
        batch.token[0], batch.pos[0], batch.logits[0] = 200, N_BATCH, True
        batch.n_tokens = 1
        if lc.llama_decode(ctx, batch) != 0:
            return "single-token decode failed"
        n_vocab = lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(model))
        ptr = lc.llama_get_logits_ith(ctx, -1)
        return [ptr[i] for i in range(n_vocab)]
    finally:
        lc.llama_batch_free(batch)
        lc.llama_free(ctx)


def main(model_path: str, gpu: bool, quick: bool = False) -> int:
    import llama_cpp as lc

    lines: list[str] = []

    @lc.llama_log_callback
    def keep(level, text, user):  # llama.cpp's log is read, not shown: the probe prints one line
        lines.append(text.decode("utf-8", errors="replace"))

    lc.llama_log_set(keep, ctypes.c_void_p(0))
    lc.llama_backend_init()
    devices = _devices()
    found = devices.gpu_devices()
    if gpu and not found:
        seen = ", ".join(f"{d.name} ({d.type})" for d in devices.list_devices()) or "none"
        hint = [ln.strip() for ln in lines if "vulkan" in ln.lower() or "cuda" in ln.lower() or "metal" in ln.lower()]
        return _fail(5, f"this build found no GPU device (ggml devices: {seen})"
                        + (f"; {hint[-1][:200]}" if hint else ""))
    out: dict = {"ok": True, "version": lc.__version__, "gpu": gpu}
    logits = {}
    for ngl in ((0, 999) if gpu and not quick else (0,)):
        mp = lc.llama_model_default_params()
        mp.n_gpu_layers = ngl
        mark = len(lines)
        model = lc.llama_model_load_from_file(model_path.encode(), mp)
        if not model:
            return _fail(3, f"could not load the bundled model with n_gpu_layers={ngl}")
        try:
            # The CPU reference keeps its ops on the CPU even when a device is visible.
            res = _decode(lc, model, op_offload=ngl > 0)
            if ngl:
                where = devices.placement(lines[mark:])
                out.update(device=where.device, runtime=where.runtime,
                           layers=f"{where.layers_offloaded}/{where.layers_total}")
        finally:
            lc.llama_model_free(model)
        if isinstance(res, str):
            return _fail(4, f"{res} (n_gpu_layers={ngl})")
        if not all(math.isfinite(x) for x in res):
            return _fail(6, f"non-finite logits with n_gpu_layers={ngl}")
        logits[ngl] = res
    if gpu and quick:
        # Passed the full probe before with this very build: that its device is
        # still there is what can have changed (a driver update, a card removed).
        out.update(device=found[0].name, runtime=found[0].runtime, device_desc=found[0].description,
                   device_total=found[0].total, quick=True)
    elif gpu:
        if out["runtime"] == "cpu" or out["layers"].split("/")[0] != out["layers"].split("/")[1]:
            return _fail(7, f"llama.cpp did not offload every layer (offloaded {out['layers']} to {out['device']})")
        cpu, dev = logits[0], logits[999]
        top5 = sorted(range(len(cpu)), key=cpu.__getitem__, reverse=True)[:5]
        best = max(range(len(dev)), key=dev.__getitem__)
        if best not in top5:
            return _fail(8, f"the device's next token ({best}) is not among the CPU's top five {top5}: "
                            "its kernels compute something else")
        out["max_abs_logit_diff"] = round(max(abs(a - b) for a, b in zip(cpu, dev)), 4)
        d = next((x for x in found if x.name == out["device"].split("+")[0]), found[0])
        out["device_desc"], out["device_total"] = d.description, d.total
    out["system_info"] = lc.llama_print_system_info().decode(errors="replace").strip()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], "--gpu" in sys.argv[2:], "--quick" in sys.argv[2:]))
