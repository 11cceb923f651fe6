"""The real-time driver: plays the replica model on the asyncio loop's clock.

The model says when its next forward pass ends; the driver sets one loop timer for that moment,
advances the model when it fires, and wakes the handlers whose requests changed. While any
client streams, it also ticks every `stream_interval` so tokens reach the client in small
chunks, as SGLang streams them, without a timer per decode step.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from radixfleet.replica import (
    EventKind,
    MonotonicClock,
    Phase,
    ReplicaModel,
    Request,
    RequestSpec,
)


class Ticket:
    """A handler's view of one request: wait for changes, read progress."""

    __slots__ = ("changed", "request", "streaming")

    def __init__(self, request: Request, *, streaming: bool) -> None:
        self.request = request
        self.streaming = streaming
        self.changed = asyncio.Event()


class Driver:
    """Owns the model and advances it in real time on the running event loop."""

    def __init__(
        self, model: ReplicaModel, *, clock: MonotonicClock, stream_interval: float = 0.02
    ) -> None:
        self.model = model
        self.clock = clock
        self.stream_interval = stream_interval
        self._tickets: dict[Request, Ticket] = {}
        self._streams: dict[Request, Ticket] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._stream_tick_at: float | None = None

    def now(self) -> float:
        """The model's current time (the loop's monotonic clock)."""
        return self.clock.now()

    def submit(self, spec: RequestSpec, *, streaming: bool) -> Ticket:
        """Queue `spec` in the model (raises RejectedError) and return its ticket."""
        request = self.model.submit(spec, now=self.now())
        ticket = Ticket(request, streaming=streaming)
        self._tickets[request] = ticket
        if streaming:
            self._streams[request] = ticket
        self._reschedule()
        return ticket

    def release(self, ticket: Ticket) -> None:
        """Forget a ticket; aborts its request if it is still running (client went away)."""
        request = ticket.request
        self._tickets.pop(request, None)
        self._streams.pop(request, None)
        if not request.done:
            self.model.abort(request.rid, now=self.now())
            self._reschedule()

    def generated(self, ticket: Ticket) -> int:
        """Tokens the ticket's request has produced so far."""
        return self.model.generated_tokens(ticket.request)

    def poke(self) -> None:
        """Advance now and re-plan the timer (after faults or other outside changes)."""
        self._tick()

    def close(self) -> None:
        """Cancel the timer; the model stays as it is."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _tick(self) -> None:
        self._timer, self._timer_at = None, None
        if self._stream_tick_at is not None and self.now() >= self._stream_tick_at:
            self._stream_tick_at = None
        for event in self.model.advance(self.now()):
            ticket = self._tickets.get(event.request)
            if ticket is not None:
                ticket.changed.set()
                if event.kind is not EventKind.FIRST_TOKEN:
                    self._streams.pop(event.request, None)
        for request, ticket in self._streams.items():
            if request.phase is Phase.DECODE:
                ticket.changed.set()
        self._reschedule()

    def _reschedule(self) -> None:
        when = self.model.next_event_time()
        if self._streams:
            # A fixed tick, not "interval from now": frequent submissions must not defer it.
            if self._stream_tick_at is None:
                self._stream_tick_at = self.now() + self.stream_interval
            tick = self._stream_tick_at
            when = tick if when is None else min(when, tick)
        else:
            self._stream_tick_at = None
        if when == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        if when is None:
            self._timer = None
            return
        loop = asyncio.get_running_loop()
        # The model's clock and the loop's clock are both time.monotonic(), with one offset.
        self._timer = loop.call_at(loop.time() + (when - self.now()), self._tick)


async def each_change(tickets: list[Ticket]) -> AsyncIterator[tuple[int, bool]]:
    """(index, done) of every ticket still running, once now and again after each change,
    until all are done: the loop a handler of `n` samples streams them with."""
    running = set(range(len(tickets)))
    while running:
        for index in sorted(running):
            done = tickets[index].request.done
            yield index, done
            if done:
                running.discard(index)
        if running:
            await any_changed([tickets[index] for index in sorted(running)])


async def any_changed(tickets: list[Ticket]) -> None:
    """Wait until one of `tickets` has news."""
    if len(tickets) == 1:  # the common case, without a task per wait
        await tickets[0].changed.wait()
    else:
        waits = [asyncio.ensure_future(ticket.changed.wait()) for ticket in tickets]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
    for ticket in tickets:
        ticket.changed.clear()
