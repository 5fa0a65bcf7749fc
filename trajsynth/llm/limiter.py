"""Adaptive concurrency for one endpoint: one shared cap, and per role additive increase,
multiplicative decrease (AIMD) driven by how often that role is rate limited.

One :class:`AIMDLimiter` per (base_url, model) and event loop is shared by every role and
stage that talks to that endpoint, so their requests together respect one cap; each role
(``key``) has its own limit and pause, so a 429 slows the role that got it, as a rate
limiter would, and not the endpoint's other roles.

1. Every role starts at the configured limit ``ceiling`` (``max_concurrency``); all roles
   together never have more than ``ceiling`` requests in flight.
2. A request takes a slot before it is sent and gives it back when it ends. Waiting for a
   slot is never a failure and never counts against a timeout: a queued request simply waits
   (a known peer bug dropped rows exactly by timing out queued requests).
3. Every answer updates the role's rate-limited share, a moving average over about the last
   ``1 / smoothing`` answers (429 = 1, success = 0). A 429 makes its own request wait
   ``retry-after`` (the caller does that) and, only when the share is above ``threshold``
   (the endpoint really is limiting this role, not answering one request in twenty with a
   stray 429), halves the role's limit (``decrease``) and pauses the role's new sends for
   ``retry-after`` — at most once per window: 429s for requests sent before the last
   decrease do not decrease again.
4. On a success: grow the role's limit by ``1 / limit``, i.e. by about one slot per window of
   successes, up to ``ceiling`` (the TCP congestion-avoidance rule).

The fast path (a free slot, no pause) is a few comparisons and increments: at 512 requests in
flight the limiter costs nothing measurable.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time

__all__ = ["AIMDLimiter"]


class _Role:
    __slots__ = ("in_flight", "last_decrease", "limit", "paused_until", "rate_limited", "waiters")

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.in_flight = 0
        self.paused_until = 0.0
        self.last_decrease = 0.0
        self.rate_limited = 0.0  # moving average of answers that were 429s
        self.waiters: collections.deque[asyncio.Future[None]] = collections.deque()


class AIMDLimiter:
    """Slots for requests in flight: a shared cap, per-role AIMD (see the module docstring)."""

    def __init__(
        self,
        ceiling: int,
        *,
        floor: int = 1,
        decrease: float = 0.5,
        threshold: float = 0.2,
        smoothing: float = 0.05,
    ) -> None:
        self.ceiling = max(1, ceiling)
        self.floor = max(1, min(floor, self.ceiling))
        self.decrease = decrease
        self.threshold = threshold
        self.smoothing = smoothing
        self.in_flight = 0
        self.decreases = 0
        self._roles: dict[str, _Role] = {}
        self._turn = 0  # round robin over roles when slots free up
        self._wake_handle: asyncio.TimerHandle | None = None

    # -- state ---------------------------------------------------------------------------
    def _role(self, key: str) -> _Role:
        role = self._roles.get(key)
        if role is None:
            role = self._roles[key] = _Role(float(self.ceiling))
        return role

    @property
    def limit(self) -> float:
        """Requests the endpoint may have in flight now: the roles' limits, capped."""
        if not self._roles:
            return float(self.ceiling)
        return min(float(self.ceiling), sum(int(r.limit) for r in self._roles.values()))

    def role_limit(self, key: str = "") -> float:
        """The current limit of one role."""
        return self._role(key).limit

    def _free(self, role: _Role, now: float) -> bool:
        return (
            self.in_flight < self.ceiling
            and role.in_flight < int(role.limit)
            and now >= role.paused_until
        )

    # -- slots ---------------------------------------------------------------------------
    async def acquire(self, key: str = "") -> float:
        """Wait for a slot for role ``key`` (as long as it takes); return when it was granted."""
        role = self._role(key)
        now = time.monotonic()
        if not role.waiters and self._free(role, now):
            self.in_flight += 1
            role.in_flight += 1
            return now
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        role.waiters.append(fut)
        self._schedule_wake()
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release(key)  # the slot was granted as we were cancelled: give it back
            else:
                with contextlib.suppress(ValueError):
                    role.waiters.remove(fut)
            raise
        return time.monotonic()

    def release(self, key: str = "") -> None:
        """Give a slot back and wake whoever can go now."""
        self.in_flight -= 1
        self._role(key).in_flight -= 1
        self._wake()

    def _wake(self) -> None:
        """Grant slots to waiting roles (round robin), then arm a timer for paused ones."""
        roles = [r for r in self._roles.values() if r.waiters]
        if not roles:
            return
        now = time.monotonic()
        n = len(roles)
        start = self._turn % n
        self._turn += 1
        progress = True
        while progress and self.in_flight < self.ceiling:
            progress = False
            for i in range(n):
                role = roles[(start + i) % n]
                if not role.waiters or now < role.paused_until:
                    continue
                if role.in_flight >= int(role.limit):
                    continue
                fut = role.waiters.popleft()
                progress = True
                if fut.done():  # cancelled while waiting
                    continue
                self.in_flight += 1
                role.in_flight += 1
                fut.set_result(None)
                if self.in_flight >= self.ceiling:
                    break
        pauses = [r.paused_until for r in roles if r.waiters and r.paused_until > now]
        if pauses:
            self._arm_timer(min(pauses) - now)

    def _arm_timer(self, delay: float) -> None:
        loop = asyncio.get_running_loop()
        handle = self._wake_handle
        if handle is not None and not handle.cancelled():
            if handle.when() <= loop.time() + delay + 1e-3 and handle.when() > loop.time():
                return  # an earlier (or equal) wake is already armed
            handle.cancel()
        self._wake_handle = loop.call_later(delay, self._wake)

    _schedule_wake = _wake

    # -- feedback ------------------------------------------------------------------------
    def on_success(self, key: str = "") -> None:
        """Additive increase: about one slot per window of successes."""
        role = self._role(key)
        role.rate_limited -= self.smoothing * role.rate_limited
        if role.limit < self.ceiling:
            role.limit = min(float(self.ceiling), role.limit + 1.0 / role.limit)
            if role.waiters:
                self._wake()

    def on_rate_limited(self, retry_after: float, sent_at: float, key: str = "") -> None:
        """A 429 for role ``key``: when the role is being limited (see the module docstring),
        a multiplicative decrease and a pause of ``retry_after`` seconds, once per window."""
        role = self._role(key)
        role.rate_limited += self.smoothing * (1.0 - role.rate_limited)
        if role.rate_limited < self.threshold or sent_at < role.last_decrease:
            return
        now = time.monotonic()
        new = max(float(self.floor), role.limit * self.decrease)
        if new < role.limit:
            self.decreases += 1
        role.limit = new
        role.last_decrease = now
        role.paused_until = max(role.paused_until, now + max(0.0, retry_after))
