"""`bench speed`'s sides, each a worker process of its own, answer its two questions (prefill and
decode tokens/s) on the bundled model. The comparison with llama-bench is the benchmark's (it
builds llama.cpp's own tools first)."""
from __future__ import annotations

import pytest

from engine.bench import speed


@pytest.mark.parametrize("side", ["llama-cpp-python", "backend-loop", "hearth-exact", "hearth-fast"])
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


def test_an_unknown_side_is_named_in_the_error(bundled_path):
    with pytest.raises(RuntimeError, match="did not start|ended"):
        speed.Side("hearth-turbo", bundled_path, 2)
    with pytest.raises(SystemExit, match="unknown side 'hearth-turbo'; one of llama-cpp-python, backend-loop"):
        speed.worker("hearth-turbo", str(bundled_path), 2)


def test_the_prompt_is_the_documentation_cut_to_the_length_asked():
    ids = speed.prompt_ids(lambda t: t.split(), 957)
    assert len(ids) == 957 and ids[0] == "#"


def test_a_side_is_compared_with_the_reference_measured_next_to_it():
    # The machine drifts by a third between rounds; the side is 0.97x the reference in every round but
    # one, where a neighbour slowed only the side. The paired median says 0.97; the spread shows the odd round.
    ref = [200.0, 150.0, 120.0, 180.0, 210.0]
    side = [194.0, 145.5, 90.0, 174.6, 203.7]
    got = speed.paired(side, ref)
    assert got == {"median": 0.97, "min": 0.75, "max": 0.97}
    assert speed.paired([], []) == {"median": 0.0, "min": 0.0, "max": 0.0}
    assert speed.paired([5.0], [0.0])["median"] == 0.0  # a reference that measured nothing pairs with nothing


def test_each_side_runs_as_often_before_the_reference_as_after_it():
    names = ["llama-bench", "hearth-fast", "hearth-exact", "llama-cpp-python"]
    assert speed.run_order(names, 0) == names
    assert speed.run_order(names, 1) == names[::-1]
    for side in names[1:]:
        after = [speed.run_order(names, r).index(side) > speed.run_order(names, r).index("llama-bench")
                 for r in range(4)]
        assert after.count(True) == after.count(False) == 2
