"""The speculation controller on synthetic rounds: draft length from measured
cost and acceptance, probing, retiring a draft that cannot pay."""
from __future__ import annotations

from engine.speculative.controller import SpecController, SpecStats
from engine.speculative.costs import model_draft_ceiling


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


def test_a_model_draft_is_left_out_where_it_could_pay_only_accepting_nearly_everything():
    from engine.speculative.costs import model_draft_hopeless
    # A bench run here measured 0.69 of a step per verified token and a draft step
    # of 0.25: 1.06x accepting every draft, 0.93x at 80%, so it is left out...
    assert model_draft_ceiling(1.0, 0.69, 0.25) > 1.0 > model_draft_ceiling(1.0, 0.69, 0.25, accept=0.8)
    why = model_draft_hopeless(1.0, 0.69, 0.25)
    assert why and "with 80% of its drafts accepted it would run at 0.93x" in why
    assert "(1.06x accepting every one)" in why
    # ... and a GPU's draft is used.
    assert model_draft_hopeless(1.0, 0.02, 0.3) is None


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


def _free_round(ctl, st, accept_at, c0=0.050, c1=0.040, bucket=None, avail=8):
    """One round of a controller with a free draft: verify what ``free_len`` says, else a plain step.
    ``accept_at(k)``: how many of k verified drafts the text accepts. Returns the k verified."""
    k = ctl.free_len(avail, bucket)
    if k:
        acc = accept_at(k)
        ctl.record(ctl.free, k, acc, acc + 1, c0 + c1 * k, st, bucket=bucket)
    else:
        ctl.record("plain", 0, 0, 1, c0, st)
    return k


def test_a_free_draft_is_held_back_where_verifying_costs_more_than_it_brings():
    # This CPU: a verified token costs 0.8 of a step; prose accepts 1 draft in 4.
    st = SpecStats()
    ctl = SpecController(["plain"], free="ngram", hold_probe=8)
    ks = [_free_round(ctl, st, lambda k: int(k > 0 and ctl.rounds["ngram"] % 4 == 0)) for _ in range(400)]
    assert ks[0] > 0  # tried at once, before anything is measured
    late = ks[100:]
    probes = [i for i, k in enumerate(late) if k]
    assert 0 < len(probes) <= 8 and all(k <= 2 for k in late if k)  # only rare, short probes
    gaps = [b - a for a, b in zip(probes, probes[1:])]
    assert gaps == sorted(gaps)  # the probes thin out while they keep failing
    assert any("ngram drafts held back" in n for n in st.notes)


def test_a_free_draft_that_is_accepted_drafts_long():
    st = SpecStats()
    ctl = SpecController(["plain"], free="ngram")
    ks = [_free_round(ctl, st, lambda k: k) for _ in range(100)]
    assert min(ks[10:]) >= 6  # copying text: long drafts pay even at 0.8 of a step per token
    assert ctl.run.gate_open and not any("held back" in n for n in st.notes)
    assert any(n.startswith("ngram drafts verified: ") for n in st.notes)  # the first decision: not "again"
    assert not any("verified again" in n for n in st.notes)


def test_the_match_length_decides_which_hits_are_verified():
    # Four-token matches continue the text; two-token matches are coincidences.
    st = SpecStats()
    ctl = SpecController(["plain"], free="ngram", hold_probe=4)
    for i in range(300):
        n = 4 if i % 2 else 2
        _free_round(ctl, st, (lambda k: k) if n == 4 else (lambda k: 0), c1=0.030, bucket=n)
    ctl.hold_probe = ctl.hold_interval = 10**6  # no probe now: the decisions themselves
    assert ctl.free_len(8, 4) >= 4
    assert ctl.free_len(8, 2) == 0


def test_a_free_draft_must_beat_a_model_draft_in_use_not_only_plain():
    st = SpecStats()
    ctl = SpecController(["model", "plain"], free="ngram")
    for _ in range(30):
        _free_round(ctl, st, lambda k: k // 2)
    ctl.current, ctl.rate["model"] = "model", 1000.0  # a model draft far faster than anything the n-gram does
    assert ctl.free_len(8) == 0


def test_notes_past_the_cap_are_counted_not_listed():
    st = SpecStats()
    st.note([f"switch {i}" for i in range(15)])
    assert len(st.notes) == SpecStats.MAX_NOTES
    assert st.notes[:-1] == [f"switch {i}" for i in range(SpecStats.MAX_NOTES - 1)]
    assert st.notes[-1] == "... and 4 more switches"


def test_a_held_back_lookup_that_starts_paying_says_it_is_verified_again():
    st = SpecStats()
    ctl = SpecController(["plain"], free="ngram", hold_probe=2)
    for _ in range(40):
        _free_round(ctl, st, lambda k: 0, bucket=2)  # prose: two-token coincidences, all rejected
    assert ctl.run.gate_open is False
    # Then the reply starts copying its input: each token copied makes the match one
    # longer (the lookup finds the place), and a long match is verified without
    # waiting for a probe.
    copied, ks = 0, []
    for _ in range(40):
        k = _free_round(ctl, st, lambda k: k, bucket=min(32, 2 + copied))
        copied += k + 1
        ks.append(k)
    said = [n.split(":")[0] for n in st.notes]
    assert "ngram drafts held back" in said and said[-1] == "ngram drafts verified again"
    assert ks.index(next(k for k in ks if k)) <= 8 and min(ks[-10:]) >= 6


def test_probes_thin_out_until_the_gate_opens():
    # A held-back lookup whose probes are accepted whole but can never pay (a verified
    # token costing 1.2 steps) is probed ever more rarely: a fully accepted probe used
    # to start the count again, and kept a break-even probe every few hits.
    st = SpecStats()
    ctl = SpecController(["plain"], free="ngram", hold_probe=4)
    ks = [_free_round(ctl, st, lambda k: k, c1=0.060, bucket=2) for _ in range(600)]
    probes = [i for i, k in enumerate(ks[50:]) if k]
    gaps = [b - a for a, b in zip(probes, probes[1:])]
    assert 0 < len(probes) <= 6 and gaps == sorted(gaps) and ctl.run.gate_open is False


# This CPU's verification costs, in steps (bench pair 1.5B, exact kernels): feeding
# k + 1 tokens costs 1 / 2.14 / 3.65 / 6.13 / 10.96 / 22.3 steps for k = 0 / 1 / 3 / 7 / 15 / 31.
CPU_STEPS = {0: 1.0, 1: 2.14, 3: 3.65, 7: 6.13, 15: 10.96, 31: 22.3}


def _cpu_seconds(k, step=0.05):
    import numpy as np
    ks = sorted(CPU_STEPS)
    return step * float(np.interp(k, ks, [CPU_STEPS[x] for x in ks]))


def _copy_round(ctl, st, accept_at, matched):
    """A free-draft round with this CPU's costs; the draft continues a ``matched``-token match."""
    k = ctl.free_len(32, matched)
    if k:
        acc = accept_at(k)
        ctl.record(ctl.free, k, acc, acc + 1, _cpu_seconds(k), st, bucket=matched)
    else:
        ctl.record("plain", 0, 0, 1, _cpu_seconds(0), st)
    return k


def _seeded():
    ctl = SpecController(["plain"], free="ngram")
    ctl.seed_costs(_cpu_seconds(0), {k: _cpu_seconds(k) for k in (1, 4, 16)})
    return ctl


def test_a_long_copy_is_verified_in_long_drafts_and_a_short_one_not_at_all():
    # Seeded with this CPU's measured line, a copy after a 32-token match is verified
    # at once (the match length says it is the place being copied), in drafts that grow
    # at most 4 at a time (never 1 token: 2 tokens for 2.14 steps loses) to 20-32,
    # ~1.4 tokens per step; where nothing is accepted nothing is verified but the
    # rare, short probes.
    st = SpecStats()
    ctl = _seeded()
    ks = [_copy_round(ctl, st, lambda k: k, 32) for _ in range(60)]
    verified = [k for k in ks if k]
    assert ks[0] >= 3 and 1 not in ks and min(ks[30:]) >= 20
    assert all(b <= a + 4 for a, b in zip(verified, verified[1:]))
    late = ks[30:]
    tokens, steps = sum(k + 1 for k in late), sum(_cpu_seconds(k) / 0.05 for k in late)
    assert tokens / steps > 1.35
    prose = _seeded()
    ks = [_copy_round(prose, st, lambda k: 0, 2) for _ in range(200)]
    assert sum(ks) <= 12 and all(k <= 2 for k in ks)


def test_a_rejection_late_in_a_draft_does_not_cap_the_length_for_good():
    # Per-position rates made one rejection at position 12 hold k at 11 from then on;
    # rates per match length pool every position, so k grows again.
    st = SpecStats()
    ctl = _seeded()
    for _ in range(30):
        _copy_round(ctl, st, lambda k: k, 32)
    assert _copy_round(ctl, st, lambda k: min(k, 11), 32) > 12  # a copy that stopped after 11 tokens
    ks = [_copy_round(ctl, st, lambda k: k, 32) for _ in range(12)]
    assert ks[0] <= 15 and ks[-1] >= 20  # it grows again from what was accepted


def test_match_classes_learn_separately():
    st = SpecStats()
    ctl = _seeded()
    for i in range(300):
        if i % 2:
            _copy_round(ctl, st, lambda k: k, 24)  # a 24-token match: the place being copied
        else:
            _copy_round(ctl, st, lambda k: 0, 3)   # a 3-token match: a coincidence
    assert ctl._match_rates(3, 1)[0] <= 0.6 < 0.95 < ctl._match_rates(24, 1)[0]
    ctl.hold_probe = ctl.hold_interval = 10**6  # no probe now: the decisions themselves
    assert ctl.free_len(32, 3) == 0 and ctl.free_len(32, 24) > 4


def test_the_seed_starts_the_cost_line_and_a_fixed_length_is_kept():
    ctl = _seeded()
    # Two single seeded passes give a slope through the plain step (a line through two noisy
    # samples measured 1.19 of a step per token in one bench run and held the rewrite back) ...
    c0, a, b = ctl.free_costs()
    assert c0 == a == _cpu_seconds(0) and 0.6 * c0 < b < 0.85 * c0
    # ... and a third round the least-squares line
    ctl.record("ngram", 8, 8, 9, _cpu_seconds(8), SpecStats(), bucket=32)
    c0, a, b = ctl.free_costs()
    assert a > c0 and 0.55 * c0 < b < 0.75 * c0
    fixed = SpecController(["plain"], free="ngram", k_fixed=8, gated=False)
    assert fixed.free_len(32, 2) == 8  # no growth cap on a length the user fixed
    ungated = SpecController(["plain"], free="ngram", gated=False)
    assert ungated.free_len(32, 2) <= 4  # ... but a learnt one grows from what was accepted


def test_a_plain_step_is_timed_without_the_lookups_one_off_indexing():
    st = SpecStats()
    ctl = _seeded()
    ctl.record("plain", 0, 0, 1, 0.5, st, fit_seconds=0.05)  # 0.45 s of it indexed a long history
    assert ctl._plain_s[-1] == 0.05 and ctl.rate["plain"] == 1 / 0.5


def test_the_gate_opens_on_a_clear_gain_and_closes_at_break_even():
    # A predicted gain of 2.5% is within the prediction's own noise: it does not open a
    # held-back gate, but it keeps an open one open.
    from engine.speculative.gate import OPEN_MARGIN, best_rate, match_class
    ctl = _seeded()
    ctl.hold_probe = ctl.hold_interval = 10**6  # no probe: the decisions themselves
    c0, a, b = ctl.free_costs()
    cls = match_class(8)

    def gain(r):  # predicted tokens per step of a copy after an 8-token match, class rate r
        ctl._len_tries[cls], ctl._len_acc[cls] = 100000, round(r * 100000)
        return best_rate(ctl._match_rates(8, 4), ctl._verify_cost(a, b))[1] * c0

    lo, hi = 0.5, 1.0
    for _ in range(40):  # the class rate that predicts a 2.5% gain
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gain(mid) < 1.025 else (lo, mid)
    assert 1.02 < gain(hi) < OPEN_MARGIN
    ctl.run.gate_open = False
    assert ctl.free_len(32, 8) == 0
    ctl.run.gate_open = True
    assert ctl.free_len(32, 8) > 0
    gain(0.3)
    assert ctl.free_len(32, 8) == 0 and ctl.run.gate_open is False


def test_a_one_token_draft_is_costed_at_what_a_two_token_pass_measured():
    # This CPU, in steps per pass verifying k drafts (bench pair 1.5B): the line through
    # the passes of 5 / 9 / 17 tokens says verifying one draft costs ~1.8 steps; a pass
    # of 2 tokens measures 2.14, and a draft that brings at most 2 tokens never pays
    # for that, however sure the match.
    steps = {1: 2.14, 4: 3.65, 8: 6.13, 16: 10.96}

    def fed(extra):
        ctl = SpecController(["plain"], free="ngram")
        ctl.hold_probe = ctl.hold_interval = 10**6
        ctl.seed_costs(0.05, {})
        for _ in range(10):
            ctl._cost["ngram"].extend((k, 0.05 * steps[k]) for k in (4, 8, 16))
        ctl._cost["ngram"].extend((k, 0.05 * steps[k]) for k in extra)
        return ctl

    c0, a, b = fed([]).free_costs()
    assert a + b < 1.9 * c0  # the line alone underrates a 2-token pass
    assert fed([]).free_len(1, 32) == 1  # ... so a lone sure draft would be verified
    assert fed([1, 1]).free_len(1, 32) == 0  # measured: it is not
    assert fed([1, 1]).free_len(32, 32) >= 4  # longer drafts still are


def test_short_passes_do_not_steepen_the_first_slope():
    # Seeded with this CPU's passes and two 2-draft rounds (2.6 steps: 0.8 of a step a
    # token): until the line is there the slope comes from the longer passes (~0.64),
    # not from short ones that cost more per token (it was 0.8 and held a copy back).
    ctl = SpecController(["plain"], free="ngram")
    ctl.seed_costs(0.05, {1: 0.05 * 2.14, 4: 0.05 * 3.65, 16: 0.05 * 10.96})
    for _ in range(2):
        ctl.record("ngram", 2, 2, 3, 0.05 * 2.6, SpecStats(), bucket=32)
    c0, a, b = ctl.free_costs()
    assert a == c0 and 0.6 < b / c0 < 0.66


def test_each_reply_in_a_batch_grows_its_own_copy():
    """Sequences in one batch share what the controller learns (costs, acceptance by match length)
    but each keeps its own copy length: one reply's miss does not cut another's long copy short."""
    st = SpecStats()
    ctl = SpecController(["plain"], free="ngram")
    for _ in range(40):  # a copy accepted whole, learnt in the shared figures
        _free_round(ctl, st, lambda k: k, avail=32, bucket=16)
    copying, missing = ctl.new_run(), ctl.new_run()
    ctl.record("ngram", 4, 4, 5, 0.05 + 0.04 * 4, st, bucket=16, run=copying)
    ctl.record("ngram", 4, 0, 1, 0.05 + 0.04 * 4, st, bucket=16, run=missing)
    assert ctl.free_len(32, 16, copying) == 8  # 4 accepted: may grow by 4
    assert ctl.free_len(32, 16, missing) == 4  # its own miss keeps it short
    ctl.record("ngram", 8, 8, 9, 0.05 + 0.04 * 8, st, bucket=16, run=copying)
    assert ctl.free_len(32, 16, missing) == 4  # another reply's long copy does not lengthen it


def test_a_replys_gate_and_its_notes_are_its_own():
    """A batch's replies decide their gates apart (each its own match lengths), and a reply's note
    ("held back") reaches that reply's stats, not whichever reply records next."""
    st = SpecStats()
    ctl = SpecController(["plain"], free="ngram", hold_probe=10**6)
    for i in range(300):  # four-token matches continue the text, two-token ones are coincidences
        n = 4 if i % 2 else 2
        _free_round(ctl, st, (lambda k: k) if n == 4 else (lambda k: 0), c1=0.030, bucket=n)
    copying, guessing = ctl.new_run(), ctl.new_run()
    assert copying.gate_open and guessing.gate_open  # both start from the latest decision: open
    assert ctl.free_len(8, 4, copying) >= 4 and copying.gate_open
    assert ctl.free_len(8, 2, guessing) == 0 and guessing.gate_open is False
    assert copying.gate_open  # the other's decision leaves this one's gate alone
    mine, theirs = SpecStats(), SpecStats()
    ctl.record("plain", 0, 0, 1, 0.05, theirs, run=guessing)
    ctl.record("plain", 0, 0, 1, 0.05, mine, run=copying)
    assert any(n.startswith("ngram drafts held back") for n in theirs.notes)
    assert not any("ngram drafts" in n for n in mine.notes)


def test_a_new_reply_starts_its_copies_where_the_last_reply_left_off():
    """A 128-token reply that copies its input would spend its first rounds growing its drafts 4 at a
    time from nothing; it starts from the latest reply's copy length instead."""
    st = SpecStats()
    ctl = SpecController(["plain"], free="ngram")
    first = ctl.new_run()
    for _ in range(40):
        k = ctl.free_len(32, 16, first)
        ctl.record("ngram", k, k, k + 1, 0.05 + 0.005 * k, st, bucket=16, run=first)  # long drafts pay
    assert first.last_accepted >= 16
    second = ctl.new_run()
    assert second.last_accepted == first.last_accepted and second.gate_open
    assert ctl.free_len(32, 16, second) > 4 + 4
