"""The adaptive (AIMD) concurrency limiter.

Run: PYTHONPATH=. python -m pytest tests/llm/test_limiter.py -q
"""

from __future__ import annotations

import asyncio
import time

from trajsynth.llm.limiter import AIMDLimiter


def test_slots_are_bounded_and_waiting_is_not_failing() -> None:
    async def main() -> tuple[int, int]:
        lim = AIMDLimiter(4)
        peak = done = 0

        async def job() -> None:
            nonlocal peak, done
            await lim.acquire()
            peak = max(peak, lim.in_flight)
            await asyncio.sleep(0.01)
            lim.release()
            done += 1

        await asyncio.gather(*(job() for _ in range(40)))
        return peak, done

    peak, done = asyncio.run(main())
    assert peak == 4 and done == 40


def test_429_storm_halves_once_per_window_pauses_and_grows_back() -> None:
    async def main() -> dict[str, float]:
        lim = AIMDLimiter(16, floor=2)
        sent = [await lim.acquire() for _ in range(16)]
        for _ in sent:
            lim.release()
        # a burst of 429s for requests sent before the first decrease halves only once
        for s in sent:
            lim.on_rate_limited(0.05, s)
        after_burst = lim.limit
        t0 = time.monotonic()
        await lim.acquire()  # paused for retry-after: waits, does not fail
        waited = time.monotonic() - t0
        lim.release()
        # a 429 for a request sent after the decrease halves again, never below the floor
        for _ in range(5):
            s = await lim.acquire()
            lim.release()
            lim.on_rate_limited(0.0, s)
        floor = lim.limit
        # additive increase: about one slot per window of successes, up to the ceiling
        for _ in range(400):
            lim.on_success()
        return {
            "burst": after_burst,
            "waited": waited,
            "floor": floor,
            "grown": lim.limit,
            "decreases": lim.decreases,
        }

    r = asyncio.run(main())
    assert r["burst"] == 8.0 and r["waited"] >= 0.045
    assert r["floor"] == 2.0 and r["decreases"] == 3  # 16→8→4→2, then clamped at the floor
    assert r["grown"] == 16.0


def test_stray_429s_neither_shrink_nor_pause_the_role() -> None:
    """One answer in twenty being a 429 is a fault, not a rate limit: the limit stays."""

    async def main() -> tuple[float, int]:
        lim = AIMDLimiter(16)
        for i in range(2000):
            s = await lim.acquire()
            lim.release()
            if i % 20 == 7:
                lim.on_rate_limited(1.0, s)
            else:
                lim.on_success()
        return lim.limit, lim.decreases

    limit, decreases = asyncio.run(main())
    assert limit == 16.0 and decreases == 0


def test_a_429_slows_the_role_that_got_it_not_the_others() -> None:
    async def main() -> dict[str, float]:
        lim = AIMDLimiter(8)
        for _ in range(15):  # the judge is being rate limited
            s = await lim.acquire("judge")
            lim.release("judge")
            lim.on_rate_limited(0.5, s, "judge")
        t0 = time.monotonic()
        got = [await lim.acquire("teacher") for _ in range(8)]  # all 8 at once, no pause
        teacher_wait = time.monotonic() - t0
        for _ in got:
            lim.release("teacher")
        return {
            "judge": lim.role_limit("judge"),
            "teacher": lim.role_limit("teacher"),
            "teacher_wait": teacher_wait,
        }

    r = asyncio.run(main())
    assert r["judge"] < 8 and r["teacher"] == 8.0 and r["teacher_wait"] < 0.1


def test_roles_share_the_endpoint_cap() -> None:
    async def main() -> int:
        lim = AIMDLimiter(4)
        peak = 0

        async def job(role: str) -> None:
            nonlocal peak
            await lim.acquire(role)
            peak = max(peak, lim.in_flight)
            await asyncio.sleep(0.01)
            lim.release(role)

        await asyncio.gather(*(job(r) for r in ["a", "b", "c"] * 10))
        return peak

    assert asyncio.run(main()) == 4


def test_additive_increase_is_about_one_slot_per_window() -> None:
    lim = AIMDLimiter(100)
    lim._role("").limit = 10.0
    for _ in range(10):  # one window of successes at limit 10
        lim.on_success()
    assert 10.9 < lim.role_limit() < 11.0


def test_cancelled_waiters_do_not_leak_slots() -> None:
    async def main() -> tuple[int, int]:
        lim = AIMDLimiter(1)
        await lim.acquire()
        waiters = [asyncio.ensure_future(lim.acquire()) for _ in range(5)]
        await asyncio.sleep(0)
        for w in waiters[:4]:
            w.cancel()
        lim.release()
        await asyncio.sleep(0)
        await waiters[4]
        held = lim.in_flight
        lim.release()
        return held, lim.in_flight

    held, after = asyncio.run(main())
    assert held == 1 and after == 0
