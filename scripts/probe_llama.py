"""Check that the installed llama-cpp-python survives a multi-token batch.

Run in a subprocess by scripts/setup.py. A native build with the AMX kernels
on some CPUs segfaults in ggml_backend_amx_mul_mat as soon as a batch holds
more than one token, so we decode a real 48-token batch on the bundled model
and then one token, and print the build's feature line. Exit 0 means usable.
"""
from __future__ import annotations

import ctypes
import sys


def main(model_path: str) -> int:
    import llama_cpp as lc

    @lc.llama_log_callback
    def quiet(level, text, user):  # keep the probe's output to one line
        pass

    lc.llama_log_set(quiet, ctypes.c_void_p(0))
    lc.llama_backend_init()
    model = lc.llama_model_load_from_file(model_path.encode(), lc.llama_model_default_params())
    if not model:
        print("probe: could not load the bundled model", file=sys.stderr)
        return 3
    cp = lc.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch = 256, 64, 64
    ctx = lc.llama_init_from_model(model, cp)
    n = 48
    batch = lc.llama_batch_init(n, 0, 1)
    for i in range(n):
        batch.token[i] = 100 + i
        batch.pos[i] = i
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = 0
        batch.logits[i] = i == n - 1
    batch.n_tokens = n
    if lc.llama_decode(ctx, batch) != 0:
        print("probe: batch decode failed", file=sys.stderr)
        return 4
    batch.token[0], batch.pos[0], batch.logits[0] = 200, n, True
    batch.n_tokens = 1
    if lc.llama_decode(ctx, batch) != 0:
        print("probe: single-token decode failed", file=sys.stderr)
        return 4
    info = lc.llama_print_system_info().decode(errors="replace")
    print(f"probe: ok llama-cpp-python {lc.__version__}; {info.strip()}")
    lc.llama_batch_free(batch)
    lc.llama_free(ctx)
    lc.llama_model_free(model)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
