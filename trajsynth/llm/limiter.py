"""Adaptive concurrency for one endpoint: additive increase, multiplicative decrease (AIMD).

One :class:`AIMDLimiter` per (base_url, model) and event loop is shared by every role and
stage that talks to that endpoint, so their requests together respect one limit.

1. Start at the configured limit ``ceiling`` (``max_concurrency``).
2. A request takes a slot before it is sent and gives it back when it ends. Waiting for a
   slot is never a failure and never counts against a timeout: a queued request simply waits
   (a known peer bug dropped rows exactly by timing out queued requests).
3. On a 429: halve the limit (``decrease``), at most once per window — a burst of 429s for
   requests sent before the last decrease does not halve again — and pause new sends until
   the server's ``retry-after`` has passed.
4. On a success: grow the limit by ``1 / limit``, i.e. by about one slot per window of
   successes, up to ``ceiling`` (the TCP congestion-avoidance rule).

The fast path (a free slot, no pause) is a comparison and an increment: at 512 requests in
flight the limiter costs nothing measurable.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time

__all__ = ["AIMDLimiter"]


class AIMDLimiter:
    """Slots for requests in flight, with an AIMD limit (see the module docstring)."""

    def __init__(self, ceiling: int, *, floor: int = 1, decrease: float = 0.5) -> None:
        self.ceiling = max(1, ceiling)
        self.floor = max(1, min(floor, self.ceiling))
        self.decrease = decrease
        self.limit = float(self.ceiling)
        self.in_flight = 0
        self.paused_until = 0.0
        self.last_decrease = 0.0
        self.decreases = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._wake_handle: asyncio.TimerHandle | None = None

    # -- slots ---------------------------------------------------------------------------
    def _free(self) -> bool:
        return self.in_flight < int(self.limit)

    async def acquire(self) -> float:
        """Wait for a slot (as long as it takes); return the time it was granted."""
        now = time.monotonic()
        if not self._waiters and self._free() and now >= self.paused_until:
            self.in_flight += 1
            return now
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        self._schedule_wake()
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # the slot was granted as we were cancelled: give it back
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(fut)
            raise
        return time.monotonic()

    def release(self) -> None:
        """Give a slot back and wake whoever can go now."""
        self.in_flight -= 1
        self._wake()

    def _wake(self) -> None:
        now = time.monotonic()
        if now < self.paused_until:
            self._schedule_wake()
            return
        while self._waiters and self._free():
            fut = self._waiters.popleft()
            if fut.done():
                continue
            self.in_flight += 1
            fut.set_result(None)

    def _schedule_wake(self) -> None:
        delay = self.paused_until - time.monotonic()
        if delay <= 0:
            self._wake()
            return
        if self._wake_handle is not None and not self._wake_handle.cancelled():
            if self._wake_handle.when() >= asyncio.get_running_loop().time() + delay - 1e-3:
                return
            self._wake_handle.cancel()
        self._wake_handle = asyncio.get_running_loop().call_later(delay, self._wake)

    # -- feedback ------------------------------------------------------------------------
    def on_success(self) -> None:
        """Additive increase: about one slot per window of successes."""
        if self.limit < self.ceiling:
            self.limit = min(float(self.ceiling), self.limit + 1.0 / self.limit)
            self._wake()

    def on_rate_limited(self, retry_after: float, sent_at: float) -> None:
        """Multiplicative decrease (once per window) and a pause of ``retry_after`` seconds."""
        now = time.monotonic()
        if sent_at >= self.last_decrease:
            new = max(float(self.floor), self.limit * self.decrease)
            if new < self.limit:
                self.decreases += 1
            self.limit = new
            self.last_decrease = now
        self.paused_until = max(self.paused_until, now + max(0.0, retry_after))
