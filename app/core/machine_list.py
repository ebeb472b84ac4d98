"""The machines whose devices a model's layers can go to (Settings → Machines).

Kept in the data folder (``remote/machines.json``) with what the last check found: the round trip, the
devices' memory, or why the machine could not be reached. Which of them the loaded model uses is a load
setting (``Settings.workers``). An SSH machine's key stays in the file the user chose; nothing secret is
written here.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from engine import HearthError, atomic_write
from engine.sizing import format_size
from engine.workers import ROUND_TRIPS_PER_TOKEN, WorkerMachine


@dataclass(frozen=True, slots=True)
class MachineRow:
    """A machine and what its last check found."""
    machine: WorkerMachine
    round_trip_ms: float | None = None
    memory: tuple[tuple[int, int], ...] = ()  # (free, total) per device
    checked: float = 0.0
    problem: str = ""

    @property
    def address(self) -> str:
        return self.machine.address

    def status(self) -> str:
        """One line: 'reached in 2.1 ms (about 6 ms a token) · 1 device, 23.5 GiB free', or why not."""
        if self.problem:
            return self.problem
        if self.round_trip_ms is None:
            return "not checked yet"
        devices = f"{len(self.memory)} device{'s' if len(self.memory) != 1 else ''}"
        free = sum(f for f, _ in self.memory)
        return (f"reached in {self.round_trip_ms:.1f} ms (about {ROUND_TRIPS_PER_TOKEN * self.round_trip_ms:.0f} ms "
                f"a token) · {devices}, {format_size(free)} free")

    def to_dict(self) -> dict[str, Any]:
        return {**self.machine.to_dict(), "round_trip_ms": self.round_trip_ms,
                "memory": [list(m) for m in self.memory], "checked": self.checked, "problem": self.problem}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "MachineRow":
        return cls(WorkerMachine.from_dict(d), d.get("round_trip_ms"),
                   tuple((int(f), int(t)) for f, t in d.get("memory") or ()), float(d.get("checked") or 0),
                   str(d.get("problem") or ""))


class MachineList:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir)
        self.path = self.data_dir / "remote" / "machines.json"

    def all(self) -> list[MachineRow]:
        try:
            rows = json.loads(self.path.read_text())
            return [MachineRow.from_dict(r) for r in rows]
        except FileNotFoundError:
            return []
        except (ValueError, KeyError, TypeError, HearthError):
            return []  # a damaged file lists nothing; the next save writes a good one

    def get(self, address: str) -> MachineRow | None:
        return next((r for r in self.all() if r.address == address), None)

    def machines(self, addresses: Sequence[str]) -> list[WorkerMachine]:
        """The machines saved at ``addresses`` (one read of the file), a plain one (a worker, or ssh's
        defaults) for an address not saved."""
        rows = {r.address: r for r in self.all()}
        return [rows[a].machine if a in rows else WorkerMachine(a) for a in addresses]

    def machine(self, address: str) -> WorkerMachine:
        return self.machines([address])[0]

    def save(self, row: MachineRow) -> None:
        rows = [r for r in self.all() if r.address != row.address] + [row]
        self._write(rows)

    def remove(self, address: str) -> None:
        self._write([r for r in self.all() if r.address != address])

    def _write(self, rows: list[MachineRow]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, json.dumps([r.to_dict() for r in rows], indent=1))


def check_machine(machine: WorkerMachine, data_dir: Path, previous: MachineRow | None = None) -> MachineRow:
    """Reach ``machine`` (over SSH: start its worker), measure the link and its devices, let it go again.
    A check that fails keeps what the ``previous`` one found (a worker busy with the loaded model does not
    answer, but its devices are still there), with the reason."""
    from engine.workers import open_machine

    try:
        link = open_machine(machine, data_dir, timeout=60)
    except HearthError as e:
        before = previous or MachineRow(machine)
        return MachineRow(machine, before.round_trip_ms, before.memory, time.time(), problem=str(e))
    try:
        return MachineRow(machine, link.round_trip_ms, tuple(link.memory), time.time())
    finally:
        link.close()

