"""A ticket's events, read on a thread of their own and handed to the event loop.

``Ticket.events()`` blocks, and its reader may do the request's own work
between events; neither may happen on uvicorn's event loop. Each request gets
one reader thread, which is also the only thread that ever advances or closes
the generator (a generator cannot be closed while another thread runs it).
When the client leaves, :meth:`Pump.close` cancels the ticket and the reader
closes the events at the next one, so the scheduler frees the request's slot.
"""
from __future__ import annotations

import asyncio
import threading
from typing import Generator

from ...errors import HearthError
from ...types import StreamEvent
from ..runtime.requests import Ticket

_END = object()


class Pump:
    """Reads ``ticket``'s events into the running event loop; ``await next()`` each one."""

    def __init__(self, ticket: Ticket) -> None:
        self.ticket = ticket
        self._loop = asyncio.get_running_loop()
        self._q: asyncio.Queue[object] = asyncio.Queue()
        self._stop = threading.Event()
        self.final: StreamEvent | None = None  # the request's final event, once read (its figures)
        threading.Thread(target=self._read, name="hearth-api-reply", daemon=True).start()

    def _put(self, item: object) -> None:
        try:
            self._loop.call_soon_threadsafe(self._q.put_nowait, item)
        except RuntimeError:  # the server's loop has closed: nobody is left to read it
            self._stop.set()

    def _read(self) -> None:
        events = self.ticket.events()
        try:
            for ev in events:
                self._put(ev)
                if self._stop.is_set():
                    break
            self._put(_END)
        except HearthError as e:
            self._put(e)
        except Exception as e:  # a bug must end this request with a message, not hang it
            self._put(HearthError(f"the request failed: {type(e).__name__}: {e}"))
        finally:
            if isinstance(events, Generator):
                events.close()  # in this thread, the one that ran it

    async def next(self) -> StreamEvent | None:
        """The next event; None when the events ended. A failure is raised as its HearthError."""
        item = await self._q.get()
        if item is _END:
            return None
        if isinstance(item, BaseException):
            raise item
        assert isinstance(item, StreamEvent)  # the reader puts only events, errors and _END
        if item.kind == "final":
            self.final = item
        return item

    def close(self) -> None:
        """The caller is done (finished, or the client left): stop the request."""
        self._stop.set()
        self.ticket.cancel()
