"""Serving several callers from one model: the scheduler (priorities, a queue,
continuous batching on llama.cpp) and the local OpenAI-compatible server."""
from .runtime.requests import Priority, QueueFull, RequestTimes, ServeRequest, Ticket
from .runtime.scheduler import Scheduler

__all__ = ["Priority", "QueueFull", "RequestTimes", "Scheduler", "ServeRequest", "Ticket"]
