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
    "drop_oldest": "Exact. Each step reads the kept half of the context again once (measured: {drop_step} on the "
                   "bundled model in 2k against {turn} for a turn before it; {drop_step_15b} on the 1.5B in 768 "
                   "tokens); the turns after a step read only their own message.",
    "shift": "No re-read: what stays is moved in the KV cache (llama.cpp's context shift) (measured: slowest turn "
             "after the overflow {shift_max} the median turn before it). Not bit-identical to reading the shorter "
             "chat again: measured {shift_agree} of greedy reply tokens the same, mean KL {shift_kl}. The exact "
             "profile drops in steps instead.",
    "compact": "The model summarizes what is left out and keeps the summary in its place (you can edit it). "
               "Costs the summary's writing and one read of the kept half (measured: {compact_cost}). Keeps facts "
               "from the summarized part only as well as the model summarizes.",
    "stop": "Nothing is left out: the message is refused and stays in the input box, with one click to go on "
            "under another policy.",
}

# Figures from docs/benchmarks.md's long-chat run (python -m engine bench long-chat --json, this project's
# 2-core Intel VM, no GPU, 6 Dec 2026; the bundled model in 2,048 tokens, Qwen2.5-Coder-1.5B in 768).
MEASURED = {"drop_step": "3.4 s", "turn": "0.22 s", "drop_step_15b": "4.5 s",
            "shift_max": "1.2x on the 1.5B, 1.9x on the bundled model, whose turns slow as its KV fills",
            "shift_agree": "44-92%", "shift_kl": "0.01-0.02",
            "compact_cost": "3.2 s for a 71-token summary on the bundled model, 15 s for 249 tokens on the 1.5B"}


def policy_cost(policy: str) -> str:
    """What ``policy`` costs, in words, with the measured figures."""
    return POLICY_COSTS.get(policy, "").format(**MEASURED)
