"""`bench speed`'s sides, each a worker process of its own, answer its two questions (prefill and
decode tokens/s) on the bundled model. The comparison with llama-bench is the benchmark's (it
builds llama.cpp's own tools first)."""
from __future__ import annotations

import pytest

from engine.bench import pairing, speed


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
    got = pairing.paired(side, ref)
    assert (got["median"], got["min"], got["max"]) == (0.97, 0.75, 0.97)
    assert got["ci"] == [0.75, 0.97] and got["coverage"] == 0.938  # five rounds: the whole range, at 94%
    assert pairing.paired([], []) == {"median": 0.0, "min": 0.0, "max": 0.0, "ci": [0.0, 0.0], "coverage": 0.0}
    assert pairing.paired([5.0], [0.0])["median"] == 0.0  # a reference that measured nothing pairs with nothing


def test_the_medians_interval_narrows_with_rounds_and_ignores_a_wild_one():
    assert pairing.median_ci([]) == (0.0, 0.0, 0.0)
    lo, hi, cov = pairing.median_ci([1.0, 0.9, 1.1])  # too few rounds for 90%: the range, and what it covers
    assert (lo, hi, cov) == (0.9, 1.1, 0.75)
    xs = [0.90 + 0.01 * i for i in range(15)]  # 0.90 .. 1.04, median 0.97
    lo, hi, cov = pairing.median_ci(xs)
    assert (round(lo, 2), round(hi, 2)) == (0.93, 1.01)  # the 4th smallest and the 4th largest
    assert round(cov, 3) == 0.965 and cov >= pairing.CI_LEVEL
    assert pairing.median_ci([*xs[:-1], 40.0])[:2] == (lo, hi)  # one round 40x off moves nothing
    assert pairing.median_ci(xs, level=0.5)[:2] == (xs[5], xs[9])  # a looser level, a narrower interval


def test_a_bar_is_met_only_when_the_whole_interval_clears_it():
    assert pairing.verdict(1.0, 1.08, 1.0) == "met"
    assert pairing.verdict(0.90, 0.96, 0.97) == "not met"
    assert pairing.verdict(0.94, 1.03, 1.0) == "within noise"
    # three rounds cover the median 75% of the time: no verdict either way, however far off they read
    assert pairing.verdict(0.5, 0.6, 1.0, coverage=0.75) == "too few rounds"
    assert pairing.verdict(0.94, 1.03, 1.0, coverage=0.938) == "within noise"
    assert speed.bar("pp512") == 1.0 and speed.bar("pp957") == 1.0 and speed.bar("tg128") == 0.97


def test_a_run_measures_the_sides_asked_for_and_refuses_an_unknown_one():
    assert speed.speed_sides(None) == ("hearth-exact", "hearth-fast", "llama-cpp-python")
    assert speed.speed_sides("hearth-fast", loop=True) == ("hearth-fast", "backend-loop")
    assert speed.speed_sides(" hearth-fast, hearth-fast ,llama-cpp-python") == ("hearth-fast", "llama-cpp-python")
    with pytest.raises(SystemExit, match="unknown side 'hearth-turbo'; one of llama-cpp-python"):
        speed.speed_sides("hearth-fast,hearth-turbo")
    with pytest.raises(SystemExit, match="no side named; one or more of llama-cpp-python"):
        speed.speed_sides(" , ")


def test_each_side_runs_as_often_before_the_reference_as_after_it():
    names = ["llama-bench", "hearth-fast", "hearth-exact", "llama-cpp-python"]
    assert pairing.run_order(names, 0) == names
    assert pairing.run_order(names, 1) == names[::-1]
    for side in names[1:]:
        after = [pairing.run_order(names, r).index(side) > pairing.run_order(names, r).index("llama-bench")
                 for r in range(4)]
        assert after.count(True) == after.count(False) == 2


def test_a_side_that_fails_to_start_closes_the_ones_started_before_it(bundled_path, tmp_path):
    import psutil

    with pytest.raises(RuntimeError, match="did not start|ended"):
        speed.measure_model(tmp_path, "bundled", bundled_path, 2, 64, 1, ("hearth-fast", "hearth-turbo"))
    left = [p for p in psutil.Process().children(recursive=True) if "engine.bench.speed" in " ".join(p.cmdline())]
    assert left == []


def test_a_run_reports_each_side_and_the_control_against_llama_bench(bundled_path, tmp_path):
    # llama-bench itself is built by the benchmark (minutes); here a stand-in answers its JSON, each call
    # 10% faster than the one before (a machine speeding up), so what is checked is the report: the
    # sides, the control, the reference that brackets each side, the intervals and the bars.
    fake = tmp_path / "llama-bench"
    fake.write_text("#!/usr/bin/env python3\nimport json, pathlib, sys\na = sys.argv\n"
                    f"c = pathlib.Path({str(tmp_path / 'calls')!r})\n"
                    "k = int(c.read_text()) if c.exists() else 0\nc.write_text(str(k + 1))\n"
                    "p, n = int(a[a.index('-p') + 1]), int(a[a.index('-n') + 1])\n"
                    "print(json.dumps([{'n_prompt': p, 'n_gen': n, 'avg_ts': (1000.0 if p else 50.0) * 1.1 ** k}]))\n")
    fake.chmod(0o755)
    out = speed.measure_model(tmp_path, "bundled", bundled_path, 2, 64, 1, ("hearth-fast",), control=True)
    assert set(out["sides"]) == {"hearth-fast", "llama-bench-again"} and "mean of its two runs" in out["reference"]
    lb, again, fast = out["llama_bench_rounds"], out["sides"]["llama-bench-again"], out["sides"]["hearth-fast"]
    # warm-up: 6 calls; then pp512 runs llama-bench (call 6), the side, the control (call 7): 1.1x apart
    assert lb["pp512"] == [round(1000 * 1.1 ** 6, 2)] and again["rounds"]["pp512"] == [round(1000 * 1.1 ** 7, 2)]
    assert again["vs_llama_bench"] == {"pp512": 1.1, "pp64": 1.1, "tg128": 1.1} and "bars" not in again
    for t, (side,) in fast["rounds"].items():  # the side against the mean of the two runs around it
        assert fast["vs_llama_bench"][t] == pytest.approx(side / ((lb[t][0] + again["rounds"][t][0]) / 2), abs=1e-3)
    assert fast["vs_llama_bench_ci"]["tg128"] == fast["vs_llama_bench_range"]["tg128"]
    assert fast["bars"] == {"pp512": "too few rounds", "pp64": "too few rounds", "tg128": "too few rounds"}


def test_a_side_between_two_runs_of_the_reference_is_read_against_both():
    # The machine slows steadily; the side runs at 0.95x of the moment's speed, between two reference runs.
    before, after = [100.0, 90.0, 80.0], [90.0, 80.0, 70.0]
    side = [0.95 * 95.0, 0.95 * 85.0, 0.95 * 75.0]
    assert pairing.bracket(before, after) == [95.0, 85.0, 75.0]
    assert pairing.paired(side, pairing.bracket(before, after))["median"] == 0.95
    assert pairing.paired(side, before)["median"] < 0.91  # one run of the reference reads the slowing as the side's
