"""Set-up picks the llama.cpp runtime by evidence, falls back with a reason, and never rebuilds what works.

scripts/setup.py, scripts/runtimes.py and scripts/toolchains.py are stdlib-only
scripts; they are loaded by path. Builds, installs and probes are replaced by
recorders here: these tests check the decisions, not a compiler.
"""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str, rel: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / rel)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


setup = _load("hearth_setup_script", "scripts/setup.py")
runtimes = setup.runtimes
toolchains = setup.toolchains

# tinyBLAS compiled in, as llama.cpp builds it; the exact profile turns it off at run time (ggml_patch.py).
EXACT_FLAGS = ("-DGGML_LLAMAFILE=ON", "-DGGML_NATIVE=OFF")
X86_EXACT = ("-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF")


def machine(**kw):
    kw.setdefault("system", "linux")
    kw.setdefault("arch", "x86_64")
    return runtimes.Machine(**kw)


def names(ladder):
    return [(r.name, r.flavour) for r in ladder]


# -- the ladder ---------------------------------------------------------------------------

def test_nvidia_card_gets_cuda_for_its_own_architecture_then_vulkan_then_cpu():
    m = machine(gpus=("NVIDIA GeForce RTX 3060",), nvidia_caps=("8.6",), pci_vendors=("nvidia",),
                vulkan_icds=("nvidia_icd",))
    ladder, notes = runtimes.ladder(m)
    assert names(ladder) == [("cuda", "cuda-sm86"), ("vulkan", "vulkan"), ("cpu", "avx2"), ("cpu", "sse42")]
    assert "-DCMAKE_CUDA_ARCHITECTURES=86-real" in ladder[0].flags.split()
    assert "RTX 3060" in ladder[0].why and "8.6" in ladder[0].why
    assert notes == []


def test_every_build_keeps_the_cpu_exactness_flags():
    boxes = [machine(nvidia_caps=("9.0", "8.9"), pci_vendors=("nvidia",), vulkan_icds=("nvidia_icd",)),
             machine(vulkan_icds=("lvp_icd",))]
    for m in boxes:
        for rt in runtimes.ladder(m, dev=True)[0]:
            flags = rt.flags.split()
            assert all(f in flags for f in EXACT_FLAGS + X86_EXACT), rt
            assert "-march=native" not in rt.flags and "-DGGML_NATIVE=ON" not in flags
    apple = runtimes.ladder(machine(system="darwin", arch="arm64"))[0]
    assert [r.name for r in apple] == ["metal", "cpu"]
    assert all(all(f in r.flags.split() for f in EXACT_FLAGS) for r in apple)


def test_two_cards_build_both_architectures_once():
    ladder, _ = runtimes.ladder(machine(nvidia_caps=("8.6", "8.6", "9.0"), pci_vendors=("nvidia",)))
    assert ladder[0].flavour == "cuda-sm86-sm90"
    assert "-DCMAKE_CUDA_ARCHITECTURES=86-real;90-real" in ladder[0].flags.split()


def test_card_older_than_cuda_13_runs_vulkan_and_says_why():
    m = machine(gpus=("GTX 1060",), nvidia_caps=("6.1",), pci_vendors=("nvidia",), vulkan_icds=("nvidia_icd",))
    ladder, notes = runtimes.ladder(m)
    assert names(ladder)[0] == ("vulkan", "vulkan")
    assert any("6.1" in n and "7.5" in n for n in notes)


def test_amd_or_intel_gpu_gets_vulkan_when_a_driver_is_installed():
    for vendor, icd in (("amd", "radeon_icd"), ("intel", "intel_icd")):
        ladder, _ = runtimes.ladder(machine(pci_vendors=(vendor,), vulkan_icds=(icd, "lvp_icd")))
        assert ladder[0].name == "vulkan" and vendor in ladder[0].why
        assert ladder[0].probe_env == ()  # a real GPU: no software-device settings


def test_gpu_without_a_vulkan_driver_falls_to_cpu_with_the_package_to_install():
    ladder, notes = runtimes.ladder(machine(gpus=("AMD Radeon RX 7600",), pci_vendors=("amd",)))
    assert [r.name for r in ladder] == ["cpu", "cpu"]
    assert any("mesa-vulkan-drivers" in n for n in notes)
    assert "mesa-vulkan-drivers" in ladder[0].why


def test_lavapipe_is_built_for_only_on_a_dev_setup():
    m = machine(vulkan_icds=("intel_icd", "lvp_icd", "radeon_icd"))  # Mesa ships every ICD; no GPU here
    app, _ = runtimes.ladder(m)
    assert [r.name for r in app] == ["cpu", "cpu"]
    dev, _ = runtimes.ladder(m, dev=True)
    assert dev[0].name == "vulkan" and "lavapipe" in dev[0].why
    assert dict(dev[0].probe_env)["GGML_VK_VISIBLE_DEVICES"] == "0"


def test_hearth_runtime_forces_one_runtime():
    m = machine(nvidia_caps=("8.9",), pci_vendors=("nvidia",), vulkan_icds=("nvidia_icd",))
    assert {r.name for r in runtimes.ladder(m, forced="cpu")[0]} == {"cpu"}
    assert names(runtimes.ladder(m, forced="vulkan")[0]) == [("vulkan", "vulkan")]
    forced_lavapipe, _ = runtimes.ladder(machine(vulkan_icds=("lvp_icd",)), forced="vulkan")
    assert forced_lavapipe[0].probe_env  # forcing Vulkan on a GPU-less machine uses the software device
    with pytest.raises(ValueError, match="no Vulkan driver"):
        runtimes.ladder(machine(), forced="vulkan")
    with pytest.raises(ValueError, match="choose one of"):
        runtimes.ladder(m, forced="rocm")


def test_cpu_build_key_is_stable_so_existing_wheels_stay_valid():
    # The key names the cached wheel: changing it silently rebuilds for everyone.
    avx2 = runtimes.ladder(machine())[0][0]
    # -DGGML_RPC=ON joined the flags (#45), then the batch kernels behind a run-time switch (#42): a rebuild each
    assert avx2.key("0.3.36") == "fa78a8ef464c"


# -- detection ------------------------------------------------------------------------------

def test_pci_vendors_and_vulkan_drivers_are_read_from_the_system(tmp_path):
    for card, vendor in (("card0", "0x1a03"), ("card1", "0x1002"), ("card1-DP-1", "0x1002"), ("card2", "0x8086")):
        d = tmp_path / card / "device"
        d.mkdir(parents=True)
        (d / "vendor").write_text(vendor + "\n")
    assert runtimes._pci_vendors(tmp_path) == ("amd", "intel")  # the BMC's ASPEED and connectors are left out
    icd = tmp_path / "my_icd.x86_64.json"
    icd.write_text("{}")
    assert "my_icd" in runtimes._vulkan_icds({"VK_DRIVER_FILES": str(icd)})


def test_detect_reuses_the_engines_hardware_probe():
    hw = runtimes.engine_hardware(ROOT)
    assert hw is not None and callable(hw.probe)
    m = runtimes.detect(ROOT)
    assert isinstance(m.gpus, tuple) and m.system == sys.platform


# -- toolchains -------------------------------------------------------------------------------

def test_vulkan_headers_need_layer_settings_and_spirv_beside_them(tmp_path):
    inc = tmp_path / "include"
    (inc / "vulkan").mkdir(parents=True)
    (inc / "vulkan" / "vulkan_core.h").write_text("#define VK_HEADER_VERSION 239\n")
    assert not toolchains.headers_ok(inc)
    (inc / "vulkan" / "vulkan_core.h").write_text("#define VK_EXT_layer_settings 1\n")
    assert not toolchains.headers_ok(inc)  # spirv.hpp missing
    (inc / "spirv" / "unified1").mkdir(parents=True)
    (inc / "spirv" / "unified1" / "spirv.hpp").write_text("")
    assert not toolchains.headers_ok(inc)  # SPIRV-Headers' CMake package missing: ggml-vulkan's CMake needs it
    cfg = tmp_path / "share" / "cmake" / "SPIRV-Headers"
    cfg.mkdir(parents=True)
    (cfg / "SPIRV-HeadersConfig.cmake").write_text("")
    assert toolchains.headers_ok(inc) and toolchains.spirv_config(inc) == cfg


def test_a_failed_build_is_summed_up_by_its_first_error_not_pips_closing_lines():
    log = ("  -- Found Vulkan: /usr/lib/libvulkan.so.1\n"
           "  CMake Error at ggml-vulkan/CMakeLists.txt:14 (find_package):\n"
           "    Could not find a package configuration file provided by \"SPIRV-Headers\"\n\n"
           "  error: subprocess-exited-with-error\n  ERROR: Failed building wheel for llama-cpp-python\n")
    assert setup.first_error(log).startswith("CMake Error at ggml-vulkan/CMakeLists.txt:14 (find_package): "
                                             "Could not find a package configuration file provided by")


def test_wheel_toolkit_layout_gets_lib64_and_unversioned_links(tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    for f in ("libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13"):
        (lib / f).write_text("")
    toolchains.patch_wheel_toolkit(tmp_path)
    toolchains.patch_wheel_toolkit(tmp_path)  # idempotent
    assert (tmp_path / "lib64" / "libcublas.so.13").exists()
    for f in ("libcudart.so", "libcublas.so", "libcublasLt.so"):
        assert (lib / f).is_symlink() and (lib / f).resolve().name == f + ".13"


# -- set-up's choices, with builds and probes recorded instead of run -------------------------

class Box:
    """A fake machine for ensure_llama: which builds compile, which probes pass."""

    def __init__(self, monkeypatch, tmp_path, m, *, broken=None, unavailable=(), installed="0.3.36"):
        broken = broken or {}
        self.built, self.installed, self.probed = [], [], []
        self.version = installed
        monkeypatch.setattr(setup, "STAMP", tmp_path / "stamp.json")
        monkeypatch.setattr(setup, "bundled_model", lambda: tmp_path / "model.gguf")
        monkeypatch.setattr(setup.runtimes, "detect", lambda root: m)
        monkeypatch.setattr(setup, "installed_llama", lambda: self.version)
        monkeypatch.setattr(setup, "file_sha", lambda p: "sha-" + p.name)
        monkeypatch.delenv("HEARTH_RUNTIME", raising=False)

        def build(rt, key):
            if rt.flavour in unavailable:
                raise setup.BuildFailed(f"{rt.name} toolchain missing", remember=False)
            self.built.append(rt.flavour)
            if rt.flavour in broken and broken[rt.flavour] == "compile":
                raise setup.BuildFailed(f"{rt.flavour} failed to compile")
            return tmp_path / f"{rt.flavour}.whl"

        def pip(*args, env=None):
            self.installed.append(Path(args[-1]).stem)

        def probe(model, rt, quick=False):
            self.probed.append(rt.flavour + ("-quick" if quick else ""))
            if broken.get(rt.flavour) == "probe":
                return False, {"error": "signal 11: crashed on a batch"}
            dev = {"device": "Vulkan0", "device_desc": "llvmpipe"} if rt.gpu else {}
            return True, {"ok": True, **dev}

        monkeypatch.setattr(setup, "build_wheel", build)
        monkeypatch.setattr(setup, "pip", pip)
        monkeypatch.setattr(setup, "probe", probe)


LAVAPIPE = runtimes.Machine(vulkan_icds=("lvp_icd",), system="linux", arch="x86_64")


def test_a_gpu_build_that_fails_falls_back_and_the_reason_is_recorded(monkeypatch, tmp_path):
    box = Box(monkeypatch, tmp_path, LAVAPIPE, broken={"vulkan": "probe"})
    state: dict = {}
    setup.ensure_llama(state, ["dev"])
    assert box.built == ["vulkan", "avx2"] and box.installed == ["vulkan", "avx2"]
    rec = state["llama"]
    assert rec["runtime"] == "cpu" and rec["flavour"] == "avx2"
    assert any("vulkan" in f and "crashed on a batch" in f for f in rec["fallbacks"])
    assert state["llama_failed"]  # remembered: the next set-up does not build it again
    (tmp_path / "stamp.json").write_text(json.dumps(state))
    shown = setup_runtime_from(tmp_path / "stamp.json")
    assert shown.runtime == "cpu" and any("crashed on a batch" in f for f in shown.fallbacks)

    again = Box(monkeypatch, tmp_path, LAVAPIPE, broken={"vulkan": "probe"})
    setup.ensure_llama(state, ["dev"])
    assert again.built == [] and again.installed == [] and again.probed == ["avx2-quick"]
    assert any("HEARTH_RUNTIME=vulkan" in f for f in state["llama"]["fallbacks"])


def setup_runtime_from(stamp: Path):
    from engine.backends.llama.devices import setup_runtime

    venv = stamp.parent / "venv"
    venv.mkdir(exist_ok=True)
    (venv / ".hearth-setup.json").write_text(stamp.read_text())
    return setup_runtime(venv)


def test_what_passed_its_probe_is_not_rebuilt_even_without_the_wheel_cache(monkeypatch, tmp_path):
    box = Box(monkeypatch, tmp_path, LAVAPIPE)
    state: dict = {}
    setup.ensure_llama(state, ["dev"])
    assert box.built == ["vulkan"] and state["llama"]["device"] == "Vulkan0 (llvmpipe)"
    again = Box(monkeypatch, tmp_path, LAVAPIPE)  # build_wheel records any call: the cache may be empty
    setup.ensure_llama(state, ["dev"])
    assert again.built == [] and again.installed == [] and again.probed == ["vulkan-quick"]


def test_a_missing_toolchain_is_looked_for_again_next_time(monkeypatch, tmp_path):
    Box(monkeypatch, tmp_path, LAVAPIPE, unavailable=("vulkan",))
    state: dict = {}
    setup.ensure_llama(state, ["dev"])
    assert state["llama"]["runtime"] == "cpu" and not state["llama_failed"]
    box = Box(monkeypatch, tmp_path, LAVAPIPE)  # glslc installed since
    setup.ensure_llama(state, ["dev"])
    assert box.built == ["vulkan"] and state["llama"]["runtime"] == "vulkan"


def test_forcing_a_runtime_retries_a_remembered_failure(monkeypatch, tmp_path):
    Box(monkeypatch, tmp_path, LAVAPIPE, broken={"vulkan": "compile"})
    state: dict = {}
    setup.ensure_llama(state, ["dev"])
    assert state["llama"]["runtime"] == "cpu"
    box = Box(monkeypatch, tmp_path, LAVAPIPE)
    monkeypatch.setenv("HEARTH_RUNTIME", "vulkan")
    setup.ensure_llama(state, ["dev"])
    assert box.built == ["vulkan"] and state["llama"]["runtime"] == "vulkan" and not state["llama_failed"]


def test_a_crashing_cpu_build_falls_to_the_safer_flags(monkeypatch, tmp_path):
    Box(monkeypatch, tmp_path, machine(), broken={"avx2": "probe"})
    state: dict = {}
    setup.ensure_llama(state, [])
    assert state["llama"]["flavour"] == "sse42"


def test_nothing_survives_and_setup_stops_with_every_reason(monkeypatch, tmp_path):
    Box(monkeypatch, tmp_path, machine(), broken={"avx2": "probe", "sse42": "probe"})
    with pytest.raises(SystemExit, match="avx2.*crashed on a batch"):
        setup.ensure_llama({}, [])


def test_two_setups_build_one_key_once(monkeypatch, tmp_path):
    import threading
    import time

    monkeypatch.setenv("HEARTH_WHEEL_CACHE", str(tmp_path))
    calls = []

    def slow_build(rt, out):
        calls.append(out.name)
        time.sleep(0.3)
        out.mkdir()
        (out / "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl").write_text("")
        return out / "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl"

    monkeypatch.setattr(setup, "_build", slow_build)
    rt = runtimes.ladder(LAVAPIPE, dev=True)[0][0]
    got = []
    threads = [threading.Thread(target=lambda: got.append(setup.build_wheel(rt, "k"))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(got) == 2 and got[0] == got[1]


# -- torch for the transformers backend -----------------------------------------------------

def test_torch_is_the_cuda_build_for_an_nvidia_card_and_the_cpu_wheel_otherwise():
    rtx = machine(gpus=("NVIDIA GeForce RTX 3060",), nvidia_caps=("8.6",), pci_vendors=("nvidia",))
    req, why, probe = runtimes.torch_choice(rtx)
    assert (req, probe) == (runtimes.TORCH_CUDA, True) and "RTX 3060" in why
    assert runtimes.torch_choice(machine()) == (runtimes.TORCH_CPU, "no NVIDIA GPU", False)
    old = runtimes.torch_choice(machine(gpus=("GTX 1080",), nvidia_caps=("6.1",), pci_vendors=("nvidia",)))
    assert old[0] == runtimes.TORCH_CPU and "6.1" in old[1] and not old[2]
    amd = runtimes.torch_choice(machine(gpus=("Radeon RX 7900",), pci_vendors=("amd",)))
    assert amd[0] == runtimes.TORCH_CPU and "ROCm" in amd[1]
    mac = runtimes.torch_choice(machine(system="darwin", arch="arm64", nvidia_caps=("8.6",)))
    assert mac[0] == runtimes.TORCH_CPU  # PyPI's macOS wheels are the only ones there, and have no CUDA
    assert runtimes.torch_choice(rtx, "cpu") == (runtimes.TORCH_CPU, "HEARTH_TORCH=cpu", False)
    assert runtimes.torch_choice(machine(), "cuda")[0] == runtimes.TORCH_CUDA
    with pytest.raises(ValueError, match="HEARTH_TORCH"):
        runtimes.torch_choice(machine(), "rocm")


class _Proc:
    def __init__(self, rc: int, out: str = "", err: str = "") -> None:
        self.returncode, self.stdout, self.stderr = rc, out, err


@pytest.mark.parametrize("probe_ok", [True, False])
def test_a_cuda_torch_that_cannot_see_the_card_falls_back_to_the_cpu_wheel(monkeypatch, probe_ok):
    rtx = machine(gpus=("NVIDIA H200",), nvidia_caps=("9.0",), pci_vendors=("nvidia",))
    monkeypatch.setattr(runtimes, "detect", lambda root: rtx)
    monkeypatch.delenv("HEARTH_TORCH", raising=False)
    installed: list[str] = []
    monkeypatch.setattr(setup, "pip", lambda *a, **k: installed.append(a[-1]))
    proc = _Proc(0, "NVIDIA H200\n") if probe_ok else _Proc(1, err="AssertionError: torch sees no CUDA device")
    monkeypatch.setattr(setup.subprocess, "run", lambda *a, **k: proc)
    state: dict = {}
    setup.ensure_torch(state)
    if probe_ok:
        assert installed == [runtimes.TORCH_CUDA] and state["torch"]["device"] == "NVIDIA H200"
    else:
        assert installed == [runtimes.TORCH_CUDA, runtimes.TORCH_CPU]
        assert state["torch"]["requirement"] == runtimes.TORCH_CPU and "sees no CUDA device" in state["torch"]["why"]
