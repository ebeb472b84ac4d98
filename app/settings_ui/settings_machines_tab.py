"""Settings → Machines: other machines whose devices take the model's layers.

A machine is ``user@host`` (Hearth starts its worker there over SSH, so SSH's keys authenticate and
encrypt the link and the worker's port never leaves that machine) or ``host:port`` (a worker started
there by hand, ``hearth-worker``, which has no key and no encryption). Each row shows what its last
check found: the round trip (and so what it costs a token) and its devices' free memory. The checked
rows are the load's ``workers``: the model then runs in a process of its own (engine/workers/child.py).
"""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QDialog, QDialogButtonBox, QFileDialog, QFormLayout, QHBoxLayout, QLabel, QLineEdit,
                               QPushButton, QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget)

from engine import HearthError
from engine.workers import WORKER_COMMAND, WorkerMachine

from app.bridge.background import Background
from app.core.machine_list import MachineList, MachineRow, check_machine
from app.core.settings import Settings

INTRO = ("Put the model's layers on other machines' devices too. Add a machine as <b>user@host</b>: Hearth starts "
         "its worker there over SSH (Hearth must be installed there), and SSH's keys authenticate and encrypt the "
         "link. <b>host:port</b> is a worker you started there yourself (<tt>hearth-worker</tt>); its port has no "
         "key and no encryption, so use it only on a network you trust. A model that uses other machines runs in "
         "a process of its own: a machine that goes away cannot close this window.")


class AddMachineDialog(QDialog):
    """The address, a name, and for SSH the command that starts a worker there and the key file."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Add a machine")
        form = QFormLayout(self)
        self.address = QLineEdit()
        self.address.setPlaceholderText("ann@gpu-box (over SSH) or 192.168.1.20:50052 (a worker)")
        self.name = QLineEdit()
        self.name.setPlaceholderText("optional, e.g. the desktop")
        self.command = QLineEdit(WORKER_COMMAND)
        self.command.setToolTip("What starts a worker on that machine over SSH (an installed Hearth's hearth-worker)")
        self.identity = QLineEdit()
        self.identity.setPlaceholderText("default: ssh's own keys and agent")
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        row = QHBoxLayout()
        row.addWidget(self.identity)
        row.addWidget(browse)
        form.addRow("Address", self.address)
        form.addRow("Name", self.name)
        form.addRow("Worker command", self.command)
        form.addRow("SSH key", row)
        self.error = QLabel()
        self.error.setStyleSheet("color: #d9480f;")
        self.error.setWordWrap(True)
        form.addRow(self.error)
        box = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        box.accepted.connect(self.accept)
        box.rejected.connect(self.reject)
        form.addRow(box)
        self.machine: WorkerMachine | None = None

    def _browse(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "SSH key", str(Path.home() / ".ssh"))
        if path:
            self.identity.setText(path)

    def accept(self) -> None:  # noqa: D401 (Qt override)
        try:
            self.machine = WorkerMachine(self.address.text().strip(), self.name.text().strip(),
                                         self.command.text().strip() or WORKER_COMMAND,
                                         self.identity.text().strip() or None)
        except HearthError as e:
            self.error.setText(str(e))
            return
        super().accept()


class MachinesTab(QWidget):
    def __init__(self, settings: Settings, data_dir: Path, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.store = MachineList(data_dir)
        self.data_dir = Path(data_dir)
        self._bg = Background(self)
        lay = QVBoxLayout(self)
        intro = QLabel(INTRO)
        intro.setWordWrap(True)
        lay.addWidget(intro)
        self.table = QTreeWidget()
        self.table.setHeaderLabels(["Machine", "Address", "Last check"])
        self.table.setRootIsDecorated(False)
        lay.addWidget(self.table)
        buttons = QHBoxLayout()
        self.add_button, self.check_button, self.remove_button = (QPushButton("Add…"), QPushButton("Check"),
                                                                   QPushButton("Remove"))
        for b in (self.add_button, self.check_button, self.remove_button):
            buttons.addWidget(b)
        buttons.addStretch(1)
        lay.addLayout(buttons)
        self.add_button.clicked.connect(self.ask_add)
        self.check_button.clicked.connect(lambda: [self.check(a) for a in self.selected()])
        self.remove_button.clicked.connect(lambda: [self.remove(a) for a in self.selected()])
        used = set(settings.workers)
        for row in self.store.all():
            self._show(row, row.address in used)
        for address in settings.workers:  # used, but not in the list (a settings file from elsewhere)
            if self._item(address) is None:
                self._show(MachineRow(WorkerMachine(address)), True)

    # -- what the dialog reads -------------------------------------------------------------

    def values(self) -> dict:
        """The machines ticked for the model, in the list's order."""
        rows = [self.table.topLevelItem(i) for i in range(self.table.topLevelItemCount())]
        return {"workers": tuple(it.data(0, Qt.ItemDataRole.UserRole) for it in rows
                                 if it.checkState(0) == Qt.CheckState.Checked)}

    def selected(self) -> list[str]:
        return [it.data(0, Qt.ItemDataRole.UserRole) for it in self.table.selectedItems()]

    # -- actions -----------------------------------------------------------------------------

    def ask_add(self) -> None:
        dlg = AddMachineDialog(self)
        if dlg.exec() and dlg.machine is not None:
            self.add(dlg.machine)

    def add(self, machine: WorkerMachine) -> None:
        """Keep ``machine`` (ticked for the model) and check it at once."""
        row = MachineRow(machine)
        self.store.save(row)
        self._show(row, True)
        self.check(machine.address)

    def check(self, address: str) -> None:
        """Reach the machine off the GUI thread (over SSH that starts its worker, which stops again after)."""
        machine = self.store.machine(address)
        item = self._item(address)
        if item is not None:
            item.setText(2, "checking…")
        folder, previous = self.data_dir, self.store.get(address)  # the call runs on a worker thread: no widget
        self._bg.run(lambda: check_machine(machine, folder, previous), on_done=self._checked,
                     on_failed=lambda e: self._checked(MachineRow(machine, problem=str(e))), kind=f"check {address}")

    def remove(self, address: str) -> None:
        self.store.remove(address)
        item = self._item(address)
        if item is not None:
            self.table.takeTopLevelItem(self.table.indexOfTopLevelItem(item))

    # -- rows ----------------------------------------------------------------------------------

    def _checked(self, row: MachineRow) -> None:
        if self.store.get(row.address) is not None:  # not removed meanwhile
            self.store.save(row)
        item = self._item(row.address)
        if item is not None:
            item.setText(2, row.status())
            item.setToolTip(2, row.status())

    def _item(self, address: str) -> QTreeWidgetItem | None:
        for i in range(self.table.topLevelItemCount()):
            it = self.table.topLevelItem(i)
            if it.data(0, Qt.ItemDataRole.UserRole) == address:
                return it
        return None

    def _show(self, row: MachineRow, used: bool) -> None:
        it = self._item(row.address) or QTreeWidgetItem(self.table)
        it.setText(0, row.machine.label)
        it.setText(1, row.address + ("  (over SSH)" if row.machine.ssh else ""))
        it.setText(2, row.status())
        it.setData(0, Qt.ItemDataRole.UserRole, row.address)
        it.setFlags(it.flags() | Qt.ItemFlag.ItemIsUserCheckable)
        it.setCheckState(0, Qt.CheckState.Checked if used else Qt.CheckState.Unchecked)
        it.setToolTip(0, "Ticked: the model's layers go to this machine's devices too")
