"""What speculation did during one reply, as its stats report it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence


@dataclass(slots=True)
class SpecStats:
    """What speculation did during one reply; ``as_dict`` is what the stats report."""

    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    target_passes: int = 0
    generated: int = 0
    per_position_drafted: list[int] = field(default_factory=list)
    per_position_accepted: list[int] = field(default_factory=list)
    mode_tokens: dict[str, int] = field(default_factory=dict)
    mode_rounds: dict[str, int] = field(default_factory=dict)
    mode_drafted: dict[str, int] = field(default_factory=dict)
    switched_off: int = 0
    notes: list[str] = field(default_factory=list)
    _more: int = 0

    def count_round(self, drafted: int, accepted: int) -> None:
        """One verified round: ``drafted`` proposals, of which the first ``accepted`` were kept."""
        self.rounds += 1
        self.drafted += drafted
        self.accepted += accepted
        for i in range(drafted):
            if i >= len(self.per_position_drafted):
                self.per_position_drafted.append(0)
                self.per_position_accepted.append(0)
            self.per_position_drafted[i] += 1
            self.per_position_accepted[i] += i < accepted

    MAX_NOTES = 12

    def note(self, lines: Sequence[str]) -> None:
        """Say why the controller switched; past ``MAX_NOTES`` in one reply, only count them."""
        for line in lines:
            if not self._more and len(self.notes) < self.MAX_NOTES:
                self.notes.append(line)
                continue
            self._more += 2 if not self._more else 1  # the last note kept becomes part of the count
            self.notes[-1] = f"... and {self._more} more switches"

    def as_dict(self) -> dict:
        acc = [a / d if d else 0.0 for a, d in zip(self.per_position_accepted, self.per_position_drafted)]
        return {
            "rounds": self.rounds,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "acceptance_rate": round(self.accepted / self.drafted, 4) if self.drafted else 0.0,
            "mean_accepted_length": round(self.accepted / self.rounds, 3) if self.rounds else 0.0,
            "acceptance_per_position": [round(x, 4) for x in acc],
            "target_passes": self.target_passes,
            "target_passes_per_token": round(self.target_passes / self.generated, 4) if self.generated else 0.0,
            "tokens_by_mode": dict(self.mode_tokens),
            "rounds_by_mode": dict(self.mode_rounds),
            "drafted_by_mode": dict(self.mode_drafted),
            "switched_off": self.switched_off,
            "notes": list(self.notes),
        }
