"""Serving several callers from one model: the scheduler (priorities, a queue,
continuous batching on llama.cpp) and the local OpenAI-compatible server.

This package is public: the app runs the local server, reads its metrics and starts coding agents
through the names below (docs/layout.md, "The engine's face"); the scheduler's are imported here, the
others from their modules when first asked."""
from typing import TYPE_CHECKING

from ..exports import lazy_exports
from .runtime.requests import Priority, QueueFull, RequestTimes, ServeRequest, Ticket
from .runtime.scheduler import Scheduler

if TYPE_CHECKING:
    from .agents import AGENTS, agent_command, find_agent, install_hint
    from .http.audio_routes import AudioRoutes
    from .http.keys import PRIORITIES
    from .http.other_devices import exposure, key_ring
    from .http.server import LocalServer
    from .metrics import FinishedRequest, ServerMetrics
    from .metrics_window import MetricsWindow
    from .runtime.library_pool import library_pool
    from .runtime.targets import loaded_model_id

_WHERE = {
    **dict.fromkeys(["AGENTS", "agent_command", "find_agent", "install_hint"], ".agents"),
    "AudioRoutes": ".http.audio_routes", "PRIORITIES": ".http.keys",
    "exposure": ".http.other_devices", "key_ring": ".http.other_devices", "LocalServer": ".http.server",
    "FinishedRequest": ".metrics", "ServerMetrics": ".metrics", "MetricsWindow": ".metrics_window",
    "library_pool": ".runtime.library_pool", "loaded_model_id": ".runtime.targets",
}
__all__ = ["AGENTS", "PRIORITIES", "AudioRoutes", "FinishedRequest", "LocalServer", "MetricsWindow", "Priority",
           "QueueFull", "RequestTimes", "Scheduler", "ServeRequest", "ServerMetrics", "Ticket", "agent_command",
           "exposure", "find_agent", "install_hint", "key_ring", "library_pool", "loaded_model_id"]
__getattr__ = lazy_exports(__name__, _WHERE)
