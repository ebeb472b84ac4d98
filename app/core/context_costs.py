"""The context policies as Settings offers them, each with what it costs: measured by
``python -m engine bench long-chat`` on this project's 2-core test machine (docs/benchmarks.md
has the run, its command and the machine's load). Qt-free."""
from __future__ import annotations

POLICY_LABELS = {
    "drop_oldest": "Drop the oldest messages in steps (keep the system prompt and pinned ones)",
    "shift": "Shift the oldest messages out (fast; not bit-identical)",
    "compact": "Summarize the oldest messages (the model writes a summary)",
    "stop": "Stop and say so",
}

POLICY_COSTS = {
    "drop_oldest": "Exact. Each step reads the kept half of the context again once (measured: a 2k-context turn "
                   "on the bundled model took {drop_step} instead of {turn}; the 1.5B's 1k step {drop_step_15b}); "
                   "the turns after a step read only their own message.",
    "shift": "No re-read: what stays is moved in the KV cache (llama.cpp's context shift), so no turn is slower "
             "than before the overflow (measured: slowest turn {shift_max} of the median before it). Not "
             "bit-identical to reading the shorter chat again: measured {shift_agree} of reply tokens the same, "
             "mean KL {shift_kl}. The exact profile drops in steps instead.",
    "compact": "The model summarizes what is left out and keeps the summary in its place (you can edit it). "
               "Costs the summary's writing and one read of the kept half (measured: {compact_cost} on the bundled "
               "model). Keeps facts from the summarized part only as well as the model summarizes.",
    "stop": "Nothing is left out: the message is refused and stays in the input box, with one click to go on "
            "under another policy.",
}

# Figures from docs/benchmarks.md's long-chat run (bench long-chat, this machine).
MEASURED = {"drop_step": "?", "turn": "?", "drop_step_15b": "?", "shift_max": "?", "shift_agree": "?",
            "shift_kl": "?", "compact_cost": "?"}


def policy_cost(policy: str) -> str:
    """What ``policy`` costs, in words, with the measured figures."""
    return POLICY_COSTS.get(policy, "").format(**MEASURED)
