"""One tool call in a reply: what the model asks to run, the user's answer, and the result.

The card shows the tool's name, its server and its arguments before anything runs, with
Allow, Allow always (for this tool on this server) and Deny. It then shows that the call
is running, and at last the result and how long it took, or why there is none. The
arguments and the result come from the model and the server: both are shown as plain
text in labels that take no rich text, so nothing in them is a link or markup.
"""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.core import tool_steps

RESULT_SHOWN = 4000  # characters of a result the card shows (the model is given it whole)

ASKING, RUNNING = "asking", "running"
HEADLINES = {ASKING: "wants to run", RUNNING: "running…", tool_steps.DONE: "ran",
             tool_steps.FAILED: "failed", tool_steps.DENIED: "not allowed", tool_steps.STOPPED: "stopped",
             tool_steps.UNKNOWN: "not run"}


def _plain(text: str = "") -> QLabel:
    label = QLabel(text)
    label.setTextFormat(Qt.TextFormat.PlainText)  # model and server text stays inert
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label


class ToolCard(QFrame):
    """A call's card; ``decided`` carries "allow", "always" or "deny" once the user answers."""

    decided = Signal(str)

    def __init__(self, call_id: str, tool: str, server: str, arguments: str,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.call_id, self.tool, self.server = call_id, tool, server
        self.state = ""
        self.setObjectName("toolCard")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setStyleSheet("#toolCard { border: 1px solid palette(mid); border-radius: 6px; }")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(8, 6, 8, 6)
        lay.setSpacing(4)
        self.head = _plain()
        self.head.setStyleSheet("font-weight: 600;")
        lay.addWidget(self.head)
        self.args = _plain(arguments)
        self.args.setStyleSheet("font-family: monospace;")
        lay.addWidget(self.args)
        row = QHBoxLayout()
        self.btn_allow = QPushButton("Allow")
        self.btn_allow.setToolTip("Run this call once")
        self.btn_always = QPushButton("Allow always")
        self.btn_always.setToolTip(f"Run {tool} on {server} without asking again, until its tools change "
                                   "(revoke it in Settings → Tools)")
        self.btn_deny = QPushButton("Deny")
        self.btn_deny.setToolTip("Do not run it; the model is told so")
        for b, answer in ((self.btn_allow, "allow"), (self.btn_always, "always"), (self.btn_deny, "deny")):
            b.clicked.connect(lambda _=False, a=answer: self._answer(a))
            row.addWidget(b)
        row.addStretch(1)
        lay.addLayout(row)
        self.result = _plain()
        self.result.setStyleSheet("font-family: monospace;")
        self.result.hide()
        lay.addWidget(self.result)
        self.status = _plain()
        self.status.setStyleSheet("color: palette(placeholder-text); font-size: 11px;")
        self.status.hide()
        lay.addWidget(self.status)
        self._set_state(ASKING if server else tool_steps.UNKNOWN)

    @property
    def buttons(self) -> tuple[QPushButton, QPushButton, QPushButton]:
        return self.btn_allow, self.btn_always, self.btn_deny

    def _set_state(self, state: str) -> None:
        self.state = state
        where = f" · {self.server}" if self.server else ""
        self.head.setText(f"Tool call: {self.tool}{where} — {HEADLINES[state]}")
        for b in self.buttons:
            b.setVisible(state == ASKING)

    def _answer(self, answer: str) -> None:
        if self.state == ASKING:
            self._set_state(RUNNING if answer != "deny" else tool_steps.DENIED)
            self.decided.emit(answer)

    def ask(self) -> None:
        """Wait for the user's answer (the buttons show)."""
        self._set_state(ASKING)

    def running(self, why: str = "") -> None:
        self._set_state(RUNNING)
        if why:
            self.status.setText(why)
            self.status.show()

    def finish(self, ending: str, text: str, seconds: float | None = None) -> None:
        """The call's end (one of tool_steps.ENDINGS) and what the model was given."""
        self._set_state(ending)
        shown = text if len(text) <= RESULT_SHOWN else text[:RESULT_SHOWN] + f"\n… ({len(text):,} characters)"
        self.result.setText(shown)
        self.result.setVisible(bool(text))
        self.result.setStyleSheet("font-family: monospace;" + (" color: #d9480f;" if ending == tool_steps.FAILED
                                                                else ""))
        took = f"took {seconds:.2f} s" if seconds is not None and ending in (tool_steps.DONE, tool_steps.FAILED) \
            else ""
        self.status.setText(took)
        self.status.setVisible(bool(took))


def stored_card(call, result) -> ToolCard:
    """The card of a call drawn from the history (``result``: its stored tool message, or None:
    the reply ended before the call had a result)."""
    meta = ((result.metrics or {}).get("tool") or {}) if result is not None else {}
    card = ToolCard(call.id, meta.get("name") or call.name, meta.get("server") or "",
                    tool_steps.shown_arguments(call))
    if result is None:
        card.finish(tool_steps.UNKNOWN, "")
    else:
        ending = result.finish_reason if result.finish_reason in tool_steps.ENDINGS else tool_steps.DONE
        card.finish(ending, result.content, meta.get("seconds"))
    return card
