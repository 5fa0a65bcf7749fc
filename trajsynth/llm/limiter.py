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
   ``1 / smoothing`` answers (429 = 1, success = 0; 0.02, about 50: over about 20, one
   request in ten answered 429 at random crossed the threshold often enough to halve a
   role's limit three times in a short run). A 429 makes its own request wait
   ``retry-after`` (the caller does that) and, only when the share is above ``threshold``
   (the endpoint really is limiting this role, not answering one request in twenty with a
   stray 429), halves the role's limit (``decrease``) and pauses the role's new sends for
   ``retry-after`` — at most once per window: 429s for requests sent before the last
   decrease do not decrease again.
4. On a success: grow the role's limit by ``1 / limit``, i.e. by about one slot per window of
   successes, up to ``ceiling`` (the TCP congestion-avoidance rule).

The fast path (a free slot, no pause) is a few comparisons and increments: at 512 requests in
flight the limiter costs nothing measurable.

:class:`CircuitBreaker` (one per endpoint, role and event loop) stops a role from spinning on
an endpoint that answers nothing useful:

1. closed: every failed attempt (5xx, connection error, timeout, unreadable body; not a 429,
   which the limiter handles, nor a 4xx, which is an answer) adds one to a count that any
   answer resets;
2. ``failures`` consecutive failed attempts open it: it says so once (log and stderr:
   ``endpoint X for role Y: N consecutive failures, pausing Zs``) and new attempts wait
   ``pause_s`` — a short outage (a server restart) costs a pause, not rows;
3. then it half-opens: one attempt goes through as a probe while the others wait for it; an
   answer closes the breaker, a failure opens it again;
4. opened a second time without an answer in between, it fails fast: attempts raise
   :class:`~trajsynth.core.errors.CircuitOpen` (an infrastructure error, so the rollout is
   dropped and counted, never recorded as the model's) without being sent, and one probe per
   ``pause_s`` still checks whether the endpoint came back.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import sys
import time

from ..core.errors import CircuitOpen

__all__ = ["AIMDLimiter", "CircuitBreaker"]

log = logging.getLogger("trajsynth.llm")


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
        smoothing: float = 0.02,
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


class CircuitBreaker:
    """Closed → open (pause) → half-open (one probe) → closed, or failing fast (see the module
    docstring). ``failures = 0`` switches it off."""

    def __init__(self, failures: int, pause_s: float, *, where: str, role: str) -> None:
        self.failures = max(0, failures)
        self.pause_s = pause_s
        self.where = where
        self.role = role or "(any)"
        self.state = "closed"  # closed | open | half_open
        self.consecutive = 0
        self.trips = 0  # times opened since the last answer
        self.opened = 0  # times opened in all (tests, the bench)
        self.open_until = 0.0
        self.last_error = ""
        self._probe: asyncio.Event | None = None

    def _fail_fast(self) -> CircuitOpen:
        return CircuitOpen(
            f"{self.where}: circuit open for role {self.role}: {self.consecutive} consecutive "
            f"failed attempts, last: {self.last_error}"
        )

    async def before(self) -> bool:
        """Before an attempt: return at once when closed; wait out a first pause; raise
        :class:`CircuitOpen` when failing fast. True when this attempt is the probe."""
        while self.state != "closed":
            now = time.monotonic()
            if self.state == "open":
                if now >= self.open_until:
                    self.state = "half_open"
                    self._probe = asyncio.Event()
                    return True
                if self.trips > 1:
                    raise self._fail_fast()
                await asyncio.sleep(self.open_until - now)
                continue
            # half-open: a probe is in flight; wait for its outcome (or fail fast)
            if self.trips > 1:
                raise self._fail_fast()
            probe = self._probe
            if probe is not None:
                await probe.wait()
        return False

    def on_answer(self) -> None:
        """The endpoint answered (a success or a 4xx): close."""
        self.consecutive = 0
        if self.state != "closed":
            msg = f"endpoint {self.where} for role {self.role}: answering again, circuit closed"
            log.warning(msg)
            self.state = "closed"
            self.trips = 0
            self._release_probe()
        self.trips = 0

    def on_failure(self, message: str, *, probe: bool) -> None:
        """A failed attempt; ``probe``: it was the half-open probe."""
        self.consecutive += 1
        self.last_error = message
        if self.failures <= 0:
            return
        if probe or (self.state == "closed" and self.consecutive >= self.failures):
            self.trips += 1
            self.opened += 1
            self.state = "open"
            self.open_until = time.monotonic() + self.pause_s
            self._release_probe()
            if self.trips == 1:
                msg = (
                    f"endpoint {self.where} for role {self.role}: {self.consecutive} consecutive "
                    f"failures, pausing {self.pause_s:g}s (last: {message})"
                )
            elif self.trips == 2:
                msg = (
                    f"endpoint {self.where} for role {self.role}: still failing after a "
                    f"{self.pause_s:g}s pause; failing requests fast, probing every "
                    f"{self.pause_s:g}s"
                )
            else:
                return
            log.warning(msg)
            print(f"warning: {msg}", file=sys.stderr, flush=True)

    def on_abandon(self, *, probe: bool) -> None:
        """The attempt ended without an outcome (cancelled): let another attempt probe."""
        if probe and self.state == "half_open":
            self.state = "open"
            self.open_until = time.monotonic()
            self._release_probe()

    def _release_probe(self) -> None:
        if self._probe is not None:
            self._probe.set()
            self._probe = None
