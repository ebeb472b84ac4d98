"""The hardware probe: every source faked, never torch on the GGUF path."""
from __future__ import annotations

import subprocess
import sys
import types

import pytest

from engine.sizing import hardware as hwmod
from engine.sizing.hardware import GiB, MiB, cpu_only, format_size, parse_size, probe, simulated


@pytest.mark.parametrize("text,expected", [
    ("8GiB", 8 * GiB), ("8G", 8 * GiB), ("8", 8 * GiB), ("8 GiB", 8 * GiB), ("16GB", 16 * 10**9),
    ("512MiB", 512 * MiB), ("1.5GiB", int(1.5 * GiB)), ("24gib", 24 * GiB), (4096, 4096),
])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["", "eight", "8 parsecs", "GiB", "-1GiB"])
def test_parse_size_rejects_nonsense_with_a_readable_message(bad):
    with pytest.raises(ValueError, match="memory size"):
        parse_size(bad)


def test_format_size():
    assert format_size(512 * MiB) == "512 MiB"
    assert format_size(int(4.03 * GiB)) == "4.03 GiB"
    assert format_size(0) == "0 B"


def test_simulated_machines():
    hw = simulated("24GiB,12GiB", "64GiB", cores=8)
    assert [g.total for g in hw.gpus] == [24 * GiB, 12 * GiB]
    assert [g.index for g in hw.gpus] == [0, 1]
    assert hw.ram_total == hw.ram_available == 64 * GiB and hw.source == "simulated"
    cpu = simulated("none", "8GiB", cores=4)
    assert not cpu.has_gpu and cpu.cpu_cores == 4
    assert "no GPU" in cpu.describe() and "[simulated]" in cpu.describe()


def test_simulated_keeps_the_real_ram_when_only_the_gpu_is_given():
    real = probe()
    hw = simulated("8GiB")
    assert hw.ram_total == real.ram_total and hw.gpus[0].free == 8 * GiB


def test_probe_on_this_machine_never_raises_and_explains_a_missing_gpu(monkeypatch):
    monkeypatch.setattr(hwmod, "_nvml", lambda notes: [])
    monkeypatch.setattr(hwmod, "_nvidia_smi", lambda notes: [])
    monkeypatch.setattr(hwmod, "_amd_sysfs", lambda notes: [])
    monkeypatch.setattr(hwmod, "_apple", lambda total, avail: [])
    hw = probe()
    assert hw.gpus == () and hw.ram_total > 0 and hw.cpu_cores >= 1
    assert any("no GPU" in n for n in hw.notes)


def test_cpu_only_reads_the_ram_and_never_looks_for_a_gpu(monkeypatch):
    def looked(*_):
        raise AssertionError("cpu_only must not probe GPUs")
    for name in ("_nvml", "_nvidia_smi", "_amd_sysfs", "_apple", "_torch"):
        monkeypatch.setattr(hwmod, name, looked)
    monkeypatch.setattr(hwmod, "_ram", lambda: (16 * GiB, 9 * GiB, 4))
    hw = cpu_only()
    assert (hw.gpus, hw.ram_total, hw.ram_available, hw.cpu_cores) == ((), 16 * GiB, 9 * GiB, 4)
    assert hw.source == "probe"


def _fake_pynvml(gpus, fail_init=None):
    m = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    class NVMLError_LibraryNotFound(NVMLError):
        pass

    m.NVMLError, m.NVMLError_LibraryNotFound = NVMLError, NVMLError_LibraryNotFound

    def init():
        if fail_init:
            raise fail_init(m)
    m.nvmlInit = init
    m.nvmlShutdown = lambda: None
    m.nvmlDeviceGetCount = lambda: len(gpus)
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetName = lambda h: gpus[h][0].encode()
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=gpus[h][1], free=gpus[h][2], used=0)
    return m


def test_nvml_reports_several_gpus(monkeypatch):
    fake = _fake_pynvml([("NVIDIA GeForce RTX 4090", 24 * GiB, 22 * GiB), ("NVIDIA RTX A2000", 12 * GiB, 11 * GiB)])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(hwmod, "_amd_sysfs", lambda notes: [])
    hw = probe()
    assert [(g.name, g.vendor, g.free) for g in hw.gpus] == [
        ("NVIDIA GeForce RTX 4090", "nvidia", 22 * GiB), ("NVIDIA RTX A2000", "nvidia", 11 * GiB)]
    assert "RTX 4090 (22.00 GiB of 24.00 GiB free)" in hw.describe()


def test_nvml_without_a_driver_is_the_quiet_no_gpu_case(monkeypatch):
    fake = _fake_pynvml([], fail_init=lambda m: m.NVMLError_LibraryNotFound("NVML Shared Library Not Found"))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    notes: list[str] = []
    assert hwmod._nvml(notes) == [] and notes == []


def test_nvidia_smi_fallback_parses_csv(monkeypatch):
    monkeypatch.setattr(hwmod.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    out = "0, NVIDIA GeForce RTX 3060, 12288, 11000\n1, NVIDIA GeForce GTX 1080, 8192, 8000\n"
    monkeypatch.setattr(hwmod.subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout=out, stderr=""))
    gpus = hwmod._nvidia_smi([])
    assert [(g.index, g.total, g.free) for g in gpus] == [(0, 12288 * MiB, 11000 * MiB), (1, 8192 * MiB, 8000 * MiB)]


def test_amd_gpus_from_sysfs(tmp_path):
    dev = tmp_path / "card0" / "device"
    dev.mkdir(parents=True)
    (dev / "mem_info_vram_total").write_text(str(16 * GiB))
    (dev / "mem_info_vram_used").write_text(str(1 * GiB))
    (dev / "product_name").write_text("AMD Radeon RX 7800 XT\n")
    apu = tmp_path / "card1" / "device"  # an APU's 512 MiB carve-out is not a GPU worth offloading to
    apu.mkdir(parents=True)
    (apu / "mem_info_vram_total").write_text(str(512 * MiB))
    (apu / "mem_info_vram_used").write_text("0")
    (tmp_path / "card0-DP-1").mkdir()  # connector entries are skipped
    gpus = hwmod._amd_sysfs([], root=tmp_path)
    assert [(g.name, g.vendor, g.total, g.free) for g in gpus] == [
        ("AMD Radeon RX 7800 XT", "amd", 16 * GiB, 15 * GiB)]


def test_apple_unified_memory(monkeypatch):
    monkeypatch.setattr(hwmod.sys, "platform", "darwin")
    monkeypatch.setattr(hwmod.platform, "machine", lambda: "arm64")
    monkeypatch.setattr(hwmod.subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout="0\n", stderr=""))
    (gpu,) = hwmod._apple(24 * GiB, 20 * GiB)
    assert gpu.unified and gpu.total == 16 * GiB and gpu.free == 16 * GiB
    (big,) = hwmod._apple(64 * GiB, 60 * GiB)
    assert big.total == 48 * GiB


def test_torch_path_reports_rocm_as_amd(monkeypatch):
    cuda = types.SimpleNamespace(is_available=lambda: True, device_count=lambda: 1,
                                 mem_get_info=lambda i: (10 * GiB, 16 * GiB),
                                 get_device_name=lambda i: "AMD Instinct MI50")
    fake = types.SimpleNamespace(cuda=cuda, version=types.SimpleNamespace(hip="6.0"))
    monkeypatch.setitem(sys.modules, "torch", fake)
    (gpu,) = hwmod._torch([])
    assert (gpu.vendor, gpu.total, gpu.free) == ("amd", 16 * GiB, 10 * GiB)


def test_the_plan_path_never_imports_torch_and_asks_ggml_only_for_the_real_machine(bundled_path):
    # A simulated machine needs neither library. The real one is planned as the window plans it
    # (issue #21): a GGUF's GPUs are the devices llama.cpp's build registered with ggml, so that
    # asks llama_cpp; torch and transformers are never imported for a GGUF plan.
    code = ("import sys, io, contextlib\n"
            "from engine.cli import main\n"
            "seen = lambda: sorted(m for m in ('torch', 'transformers', 'llama_cpp') if m in sys.modules)\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    main(['plan', '--model', {str(bundled_path)!r}, '--gpu', '8GiB', '--ram', '16GiB', '--json'])\n"
            "    main(['plan', '--model', 'qwen2.5-7b-instruct', '--gpu', '8GiB'])\n"
            "print(seen())\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    main(['plan', '--model', {str(bundled_path)!r}, '--json'])\n"
            "print(seen())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-2:] == ["[]", "['llama_cpp']"]
