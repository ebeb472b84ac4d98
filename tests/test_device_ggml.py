"""ggml's devices through ctypes, where a model's layers went, and set-up's runtime record."""
from __future__ import annotations

import json

from engine.backends.llama import devices

# Lines as llama.cpp 0.3.36's loader prints them.
FULL = ["load_tensors: offloading 30 repeating layers to GPU\n", "load_tensors: offloading output layer to GPU\n",
        "load_tensors: offloaded 31/31 layers to GPU\n",
        "load_tensors:      Vulkan0 model buffer size =    80.00 MiB\n",
        "load_tensors:   CPU_Mapped model buffer size =    20.00 MiB\n",
        "llama_kv_cache:    Vulkan0 KV buffer size =    45.00 MiB\n",
        "llama_context:    Vulkan0 compute buffer size =    60.00 MiB\n",
        "llama_context: Vulkan_Host compute buffer size =     2.00 MiB\n"]
PARTIAL = ["load_tensors: offloaded 12/31 layers to GPU\n",
           "load_tensors:        CUDA0 model buffer size =    30.00 MiB\n",
           "load_tensors:   CPU_Mapped model buffer size =    70.00 MiB\n"]
NONE = ["load_tensors: offloaded 0/31 layers to GPU\n", "load_tensors:   CPU_Mapped model buffer size =    92.00 MiB\n"]


def test_runtime_of_names_what_computes():
    assert [devices.runtime_of(n) for n in ("Vulkan0", "CUDA1", "MTL0", "Metal", "ROCm0", "CPU", "CPU_Mapped",
                                            "CUDA_Host", "Vulkan_Host")] == \
        ["vulkan", "cuda", "metal", "metal", "rocm", "cpu", "cpu", "cpu", "cpu"]


def test_placement_reads_the_load_log():
    assert devices.placement(FULL) == devices.DevicePlacement("vulkan", "Vulkan0", 31, 31)
    assert devices.placement(PARTIAL) == devices.DevicePlacement("cuda", "CUDA0+CPU", 12, 31)
    assert devices.placement(NONE) == devices.DevicePlacement("cpu", "CPU", 0, 31)
    assert devices.placement([]) == devices.DevicePlacement("cpu", "CPU", 0, 0)


def test_ggml_lists_its_devices_with_memory():
    found = devices.list_devices()
    cpu = [d for d in found if d.type == "cpu"]
    assert cpu and cpu[0].name == "CPU" and cpu[0].total > 2**28 and 0 < cpu[0].free <= cpu[0].total
    assert all(d.is_gpu == (d.type in ("gpu", "igpu")) for d in found)
    mem = devices.memory_entries(found)
    assert mem["device_total:CPU"] == cpu[0].total


def test_describe_reports_where_the_layers_went_not_what_was_asked(bundled_path):
    from engine.backends.llama.backend import LlamaCppBackend

    # Here (a CPU build, or lavapipe hidden as it is by default) no device takes
    # the layers: asking for 99 GPU layers still runs on the CPU, and says so.
    gpus = devices.gpu_devices()
    want = (gpus[0].runtime, gpus[0].name) if gpus else ("cpu", "CPU")
    b = LlamaCppBackend(bundled_path, n_ctx=256, n_gpu_layers=99)
    try:
        info = b.describe()
        assert (info.runtime, info.device, info.n_gpu_layers) == (*want, 99)
    finally:
        b.close()


def test_setup_runtime_reads_the_stamp(tmp_path):
    assert devices.setup_runtime(tmp_path) is None
    (tmp_path / ".hearth-setup.json").write_text(json.dumps({"deps": "x"}))
    assert devices.setup_runtime(tmp_path) is None  # a venv from before the record
    rec = {"runtime": "cpu", "flavour": "avx2", "why": "fallback", "device": "CPU",
           "fallbacks": ["vulkan (vulkan): the vulkan build failed to compile"]}
    (tmp_path / ".hearth-setup.json").write_text(json.dumps({"llama": rec}))
    got = devices.setup_runtime(tmp_path)
    assert got.runtime == "cpu" and got.fallbacks == ("vulkan (vulkan): the vulkan build failed to compile",)
