"""The speculation controller on synthetic rounds: draft length from measured
cost and acceptance, probing, retiring a draft that cannot pay."""
from __future__ import annotations

from engine.spec.controller import SpecController, SpecStats, model_draft_ceiling


def test_controller_picks_k_from_measured_cost_and_acceptance():
    st = SpecStats()
    # CPU-like costs: each verified draft costs 0.7 of a step; acceptance ~0.9 per position.
    cpu = SpecController(["ngram"], k_max=8)
    gpu = SpecController(["ngram"], k_max=8)
    for r in range(40):
        k = 1 + r % 8
        acc = k if r % 10 else k - 1
        cpu.record("ngram", k, acc, acc + 1, 0.043 + 0.030 * k, st)
        gpu.record("ngram", k, acc, acc + 1, 0.043 + 0.001 * k, st)
    # Near-free verification (GPU) makes long drafts pay; CPU-like costs keep them short.
    assert gpu.k["ngram"] == 8
    assert cpu.k["ngram"] < gpu.k["ngram"]


def test_probe_interval_backs_off_while_a_mode_stays_slower():
    st = SpecStats()
    c = SpecController(["ngram", "plain"], probe_every=10, explore_rounds=1)
    c.record("ngram", 3, 0, 1, 1.0, st)       # ngram: 1 tok/s
    c.record("plain", 0, 0, 1, 0.05, st)      # plain: 20 tok/s
    assert c.current == "plain"
    intervals = []
    for _ in range(400):
        mode = c.current
        if mode == "ngram":
            intervals.append(c.probe_interval["ngram"])
            c.record("ngram", 3, 0, 1, 1.0, st)
        else:
            c.record("plain", 0, 0, 1, 0.05, st)
    assert len(intervals) >= 2 and intervals == sorted(intervals) and intervals[-1] > intervals[0]
    assert st.switched_off >= 1


def _feed(ctl, st, costs, plain_s, rounds=60, accept=1.0):
    """Drive a controller with synthetic rounds: ``costs[mode](k)`` seconds per round."""
    for _ in range(rounds):
        mode = ctl.current
        if mode == "plain":
            ctl.record("plain", 0, 0, 1, plain_s, st)
        else:
            k = ctl.k[mode]
            acc = int(k * accept)
            ctl.record(mode, k, acc, acc + 1, costs[mode](k), st)


def test_a_draft_that_cannot_win_even_accepting_everything_is_retired():
    # This CPU: plain step 53 ms; a model-draft round 53 + 66k ms (0.5B draft
    # steps plus the 1.5B verifying k more tokens), n-gram rounds 53 + 40k ms.
    st = SpecStats()
    ctl = SpecController(["model", "ngram", "plain"])
    _feed(ctl, st, {"model": lambda k: 0.053 + 0.066 * k, "ngram": lambda k: 0.053 + 0.040 * k}, 0.053)
    assert "model" in ctl.retired and "ngram" not in ctl.retired
    assert ctl.ceiling("model") < ctl.rate["plain"] < ctl.ceiling("ngram")
    assert ctl.rounds["model"] == ctl.explore_rounds  # never probed again after its first visit
    assert any("model draft off for this session" in n for n in st.notes)
    before = ctl.rounds["model"]
    _feed(ctl, st, {"model": lambda k: 0.053 + 0.066 * k, "ngram": lambda k: 0.053 + 0.040 * k}, 0.053,
          rounds=2000)
    assert ctl.rounds["model"] == before


def test_a_draft_that_could_win_is_kept_even_when_this_text_rejects_it():
    # GPU-like costs: verifying more tokens is nearly free. Low acceptance makes
    # the model slower on this text, but it is probed again, never retired.
    st = SpecStats()
    ctl = SpecController(["model", "plain"], probe_every=16)
    _feed(ctl, st, {"model": lambda k: 0.010 + 0.002 * k}, 0.008, rounds=400, accept=0.0)
    assert not ctl.retired and ctl.rounds["model"] > ctl.explore_rounds


def test_a_cost_model_replaces_the_measured_fit_for_choosing_k():
    # Measured: steep (CPU). Cost model: the GPU one, 1 pass + 0.1 per draft step.
    st = SpecStats()
    measured = SpecController(["model"], k_max=8)
    modelled = SpecController(["model"], k_max=8, round_cost=lambda k: 1 + 0.1 * k)
    for ctl in (measured, modelled):
        for r in range(40):
            k = ctl.k["model"]
            acc = k if r % 10 else k - 1  # ~0.9 per position
            ctl.record("model", k, acc, acc + 1, 0.043 + 0.066 * k, st)
    assert measured.k["model"] == 1
    assert modelled.k["model"] >= 3


def test_model_draft_ceiling_from_measured_costs():
    # This CPU (measured on the Qwen pair): a verified token 0.63 of a step, a draft step 0.45.
    assert model_draft_ceiling(1.0, 0.63, 0.45) < 1.0
    # A GPU: verifying is nearly free, the draft step is the weight ratio (0.44) or less.
    assert model_draft_ceiling(1.0, 0.02, 0.3) > 2.0
    # Free drafts and free verification: k_max + 1 tokens per step.
    assert model_draft_ceiling(1.0, 0.0, 0.0, k_max=8) == 9.0


def test_draft_length_grows_past_the_positions_tried_so_far():
    # Every draft accepted, the bench pair's GPU cost model (a draft step 0.437
    # of a pass): k must climb past the first positions tried (it stopped at 3
    # when untried positions were assumed to be accepted half the time).
    st = SpecStats()
    ctl = SpecController(["model"], k_max=8, round_cost=lambda k: 1 + 0.437 * k)
    for _ in range(60):
        k = ctl.k["model"]
        ctl.record("model", k, k, k + 1, 0.01, st)
    assert ctl.k["model"] >= 5
