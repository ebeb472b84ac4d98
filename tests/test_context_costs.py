"""Settings names each context policy's cost with the figures bench long-chat measured: every policy
has its words, and no figure is left unmeasured."""
from __future__ import annotations

from app.core.context_costs import MEASURED, POLICY_COSTS, POLICY_LABELS, policy_cost


def test_every_policy_has_a_label_and_a_cost_with_measured_figures():
    assert set(POLICY_LABELS) == set(POLICY_COSTS) == {"stop", "drop_oldest", "shift", "compact"}
    assert all(v and v != "?" for v in MEASURED.values())
    for policy in POLICY_COSTS:
        text = policy_cost(policy)
        assert text and "{" not in text and "?" not in text, policy
    assert "measured" in policy_cost("shift") and MEASURED["shift_kl"] in policy_cost("shift")
    assert policy_cost("nonsense") == ""
