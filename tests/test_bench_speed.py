"""`bench speed`'s sides, each a worker process of its own, answer its two questions (prefill and
decode tokens/s) on the bundled model. The comparison with llama-bench is the benchmark's (it
builds llama.cpp's own tools first)."""
from __future__ import annotations

import pytest

from engine.bench import speed


@pytest.mark.parametrize("side", ["llama-cpp-python", "hearth-exact", "hearth-fast"])
def test_each_side_answers_prefill_and_decode_in_its_own_process(side, bundled_path):
    s = speed.Side(side, bundled_path, 2)
    try:
        assert s.ask("pp 64") > 0 and s.ask("tg") > 0
    finally:
        s.close()
    assert s.proc.returncode == 0


def test_a_side_that_cannot_start_says_so(tmp_path):
    bad = tmp_path / "not-a-model.gguf"
    bad.write_bytes(b"GGUF but not really")
    with pytest.raises(RuntimeError, match="ended|did not start"):
        speed.Side("hearth-fast", bad, 2)


def test_the_prompt_is_the_documentation_cut_to_the_length_asked():
    ids = speed.prompt_ids(lambda t: t.split(), 957)
    assert len(ids) == 957 and ids[0] == "#"
