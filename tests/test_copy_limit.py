"""bench serve's second speculation limit: what the n-gram lookup could give on the text a reply wrote."""
import pytest

from engine.bench.copy_limit import copied_runs, copy_limit, round_cost

STEPS = {0: 50.0, 2: 100.0, 4: 150.0, 8: 250.0}  # ms: a plain step, and steps verifying k drafts


def test_a_round_costs_the_measured_step_over_a_plain_one_and_in_between_linearly():
    cost = round_cost(STEPS)
    assert [cost(k) for k in (0, 2, 4, 8)] == [1.0, 2.0, 3.0, 5.0]
    assert cost(1) == 1.5 and cost(6) == 4.0
    assert cost(17) == pytest.approx(5.0 * 18 / 9)  # past the last k: its cost per row
    with pytest.raises(ValueError, match="plain step"):
        round_cost({2: 100.0})


def test_a_reply_that_copies_its_prompt_is_verified_in_long_rounds():
    prompt = list(range(100, 140))
    reply = list(range(100, 130))  # writes the prompt out again
    # The first two tokens have nothing to continue (no earlier match of the history's end); from the
    # third the lookup finds where the reply copies, 16 drafts a round at most; the last round's own
    # token is the reply's last, so it verifies 10, not 11.
    assert copied_runs(prompt, reply, 16) == [0, 0, 16, 10]
    assert copied_runs(prompt, reply, 4) == [0, 0, 4, 4, 4, 4, 4, 2]
    assert copied_runs(prompt, reply, 16, pays=lambda m: m > 12) == [0, 0, 16] + [0] * 11  # 10 do not pay: plain
    assert copied_runs(prompt, [1, 2, 3], 16) == [0, 0, 0]  # nothing it could copy


def test_the_limit_is_tokens_over_the_plain_steps_their_rounds_cost():
    prompt, reply = list(range(100, 140)), list(range(100, 130))
    got = copy_limit([(prompt, reply)], STEPS, k_max=8)
    # runs [0, 0, 8, 8, 8, 0]: three plain steps and three rounds of 8 (5 steps each) for 30 tokens
    assert got == {"limit": round(30 / (3 + 3 * 5), 3), "copied": 0.8, "mean_run": 8.0, "tokens": 30}
    assert copy_limit([(prompt, [1, 2, 3])], STEPS)["limit"] == 1.0  # nothing copied: plain speed
    dear = {0: 50.0, 2: 200.0, 8: 500.0}  # every verified row dearer than a step: never worth a round
    assert copy_limit([(prompt, reply)], dear) == {"limit": 1.0, "copied": 0.0, "mean_run": 0.0, "tokens": 30}
    assert copy_limit([], STEPS)["limit"] == 1.0
