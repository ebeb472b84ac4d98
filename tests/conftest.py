"""Shared fixtures. Integration tests run the real bundled model on the CPU."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


@pytest.fixture(scope="session")
def bundled_path():
    from engine.models import bundled_model_path

    return bundled_model_path()


@pytest.fixture(scope="session")
def llama_backend(bundled_path):
    """One shared backend for tests that only tokenize or read metadata."""
    from engine.backends.llama_cpp import LlamaCppBackend

    b = LlamaCppBackend(bundled_path, n_ctx=2048)
    yield b
    b.close()


@pytest.fixture(scope="module")
def engine(bundled_path):
    """A real engine on the bundled model; module-scoped because loading costs ~0.5 s."""
    from engine.engine import Engine

    e = Engine.load(bundled_path, n_ctx=2048, n_threads=2)
    yield e
    e.close()
