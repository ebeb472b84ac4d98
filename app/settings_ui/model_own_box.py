"""Settings → Sampling, for this model: what a model's own settings hold besides sampling. Its system prompt
(a chat with none of its own gets it), example turns (an Ollama Modelfile's MESSAGE lines), the Think
control's default, the context it loads with, the load settings "Apply best" chose for it (Performance →
Benchmark this model), and which MCP servers' tools it is offered."""
from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import (QCheckBox, QComboBox, QFormLayout, QGroupBox, QHBoxLayout, QLabel, QPlainTextEdit,
                               QPushButton, QSpinBox, QVBoxLayout, QWidget)

from engine.library import CONTEXT_MAX, CONTEXT_MIN, TUNED_KEYS
from engine.reply_formats import ThinkControl

THINK_DEFAULT = "the model's own default"
LOAD_LABELS = {"draft": "draft", "n_threads": "CPU threads", "gpu_layers": "GPU layers", "kv_type": "KV cache",
               "exactness": "exactness"}
AS_FOR_EVERY_MODEL = "as in Settings → Model"


class ModelOwnBox(QGroupBox):
    """Edits the non-sampling part of a model's own settings (``values()`` gives it back)."""

    def __init__(self, values: dict[str, Any], think: ThinkControl | None, servers: list[str],
                 parent: QWidget | None = None) -> None:
        super().__init__("This model's own", parent)
        form = QFormLayout(self)
        self.system = QPlainTextEdit()
        self.system.setPlaceholderText("None: a chat uses its own system prompt (Settings → System prompts)")
        self.system.setMaximumHeight(64)
        self.system.setToolTip("Given to every chat with this model whose own system prompt is empty")
        form.addRow("System prompt", self.system)
        turns_row = QHBoxLayout()
        self.turns = QLabel()
        self.clear_turns = QPushButton("Clear")
        self.clear_turns.clicked.connect(lambda: self._show_turns([]))
        turns_row.addWidget(self.turns, 1)
        turns_row.addWidget(self.clear_turns)
        form.addRow("Example turns", turns_row)
        stop_row = QHBoxLayout()
        self.stop = QLabel()
        self.stop.setWordWrap(True)
        self.clear_stop = QPushButton("Clear")
        self.clear_stop.clicked.connect(lambda: self._show_stop([]))
        stop_row.addWidget(self.stop, 1)
        stop_row.addWidget(self.clear_stop)
        form.addRow("Stop at", stop_row)
        self.think = QComboBox()
        self._think_control = think
        form.addRow("Thinking", self.think)
        ctx_row = QHBoxLayout()
        self.ctx_hearth = QCheckBox("As in Settings → Model")
        self.ctx = QSpinBox()
        self.ctx.setRange(CONTEXT_MIN, CONTEXT_MAX)
        self.ctx.setSingleStep(256)
        self.ctx_hearth.toggled.connect(lambda on: self.ctx.setEnabled(not on))
        ctx_row.addWidget(self.ctx_hearth)
        ctx_row.addWidget(self.ctx, 1)
        form.addRow("Context length", ctx_row)
        load_row = QHBoxLayout()
        self.load = QLabel()
        self.load.setWordWrap(True)
        self.load.setToolTip("Set by Performance → Benchmark this model → Apply best; used whenever this model "
                             "loads, over the load settings for every model")
        self.clear_load = QPushButton("Clear")
        self.clear_load.setToolTip(f"Load this model {AS_FOR_EVERY_MODEL}")
        self.clear_load.clicked.connect(lambda: self._show_load({}))
        load_row.addWidget(self.load, 1)
        load_row.addWidget(self.clear_load)
        form.addRow("Load settings", load_row)
        tools = QVBoxLayout()
        self.all_servers = QCheckBox("Every MCP server's tools")
        tools.addWidget(self.all_servers)
        self.servers = {name: QCheckBox(name) for name in servers}
        for box in self.servers.values():
            tools.addWidget(box)
        self.all_servers.toggled.connect(lambda on: [b.setEnabled(not on) for b in self.servers.values()])
        form.addRow("Tools offered", tools)
        self.set_values(values)

    def _show_turns(self, turns: list[dict[str, str]]) -> None:
        self._turns = list(turns)
        self.turns.setText(f"{len(turns)} example turn{'s' if len(turns) != 1 else ''} every chat starts with"
                           if turns else "none")
        self.clear_turns.setEnabled(bool(turns))

    def _show_stop(self, stop: list[str]) -> None:
        self._stop = list(stop)
        self.stop.setText("  ".join(repr(s) for s in stop) if stop else "the model's end of turn only")
        self.clear_stop.setEnabled(bool(stop))

    def _show_load(self, values: dict[str, Any]) -> None:
        self._load = {k: values[k] for k in TUNED_KEYS if k in values}
        self.load.setText("; ".join(f"{LOAD_LABELS[k]} {v}" for k, v in self._load.items()) + " (yours for this "
                          "model)" if self._load else AS_FOR_EVERY_MODEL)
        self.clear_load.setEnabled(bool(self._load))

    def load_layer(self) -> str:
        """Where the model's load settings come from, in words (what the row says)."""
        return "yours for this model" if self._load else AS_FOR_EVERY_MODEL

    def set_values(self, v: dict[str, Any]) -> None:
        """Show a model's own settings (what it does not set: Hearth's)."""
        self.system.setPlainText(v.get("system_prompt") or "")
        self._show_turns(v.get("messages") or [])
        self._show_stop(v.get("stop") or [])
        self.think.clear()
        self.think.addItem(THINK_DEFAULT, None)
        t = self._think_control
        for choice in (t.choices if t is not None else ()):
            self.think.addItem({True: "On", False: "Off"}.get(choice, str(choice)), choice)
        if v.get("think") is not None and self.think.findData(v["think"]) < 0:
            self.think.addItem(f"{v['think']} (not offered by this model)", v["think"])
        self.think.setCurrentIndex(max(0, self.think.findData(v.get("think"))))
        self.think.setEnabled(t is not None or v.get("think") is not None)
        self.think.setToolTip("A chat that made no Think choice of its own starts with this"
                              if t is not None else "This model's template has no Think control")
        self.ctx_hearth.setChecked(v.get("context") is None)
        self.ctx.setValue(v.get("context") or 4096)
        self.ctx.setEnabled(v.get("context") is not None)
        self._show_load(v)
        tools = v.get("tools")
        self.all_servers.setChecked(tools is None)
        for name, box in self.servers.items():
            box.setChecked(tools is None or name in tools)
            box.setEnabled(tools is not None)

    def values(self) -> dict[str, Any]:
        """The model's own settings as edited: only what is set."""
        out: dict[str, Any] = {}
        if self.system.toPlainText().strip():
            out["system_prompt"] = self.system.toPlainText()
        if self._turns:
            out["messages"] = list(self._turns)
        if self._stop:
            out["stop"] = list(self._stop)
        if self.think.currentData() is not None:
            out["think"] = self.think.currentData()
        if not self.ctx_hearth.isChecked():
            out["context"] = self.ctx.value()
        if not self.all_servers.isChecked():
            out["tools"] = [name for name, box in self.servers.items() if box.isChecked()]
        out.update(self._load)
        return out
