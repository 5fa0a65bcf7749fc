"""Environment speed on each built-in domain: steps/s, snapshot+restore/s, state hashes/s.

Why: rollouts step environments millions of times, TSR and STeCa branch from mid-episode
states thousands of times per task, and GiGPO hashes every step's state. Measured per domain,
each against a baseline in the same run:

- steps/s: ``env.step([call])`` over the domain's example gold calls (parse, schema check,
  run, observation), replaying each task from ``reset``; baseline: the same tool functions
  called directly on the state (no environment around them), so the ratio is the
  environment's overhead;
- snapshot+restore/s: ``snap = env.snapshot(); env.step(write); env.restore(snap)`` (a
  branch: copy-on-write copies the written table); baseline: the same with
  ``copy.deepcopy`` of the state as the snapshot;
- state hashes/s after a write: the incremental hash; baseline: BLAKE2b of the canonical
  JSON of the whole state (what hashing it from scratch costs).

Nothing here is a test: it prints a table, then one JSON line.

Run: PYTHONPATH=. python bench/env.py [--quick]
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import sys
import time

from trajsynth.core.ids import stable_hash
from trajsynth.core.schema import ToolCall
from trajsynth.envs import BUILTIN_DOMAINS, EnvFactory, State, ToolError, example_tasks

QUICK = "--quick" in sys.argv
SECONDS = 0.3 if QUICK else 1.0


def rate(fn, seconds: float = SECONDS) -> float:
    """Calls of ``fn`` per second (``fn`` returns how many operations it did)."""
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        done += fn()
    return done / (time.perf_counter() - start)


def bench_domain(name: str) -> dict[str, float]:
    factory = EnvFactory()
    domain = BUILTIN_DOMAINS[name]
    tasks = [t for t in example_tasks(name) if t.ground_truth.flat_calls()]
    episodes = [
        (t.ground_truth, [
            ToolCall(id=f"c{i}", name=c.name, arguments=json.dumps(c.arguments))
            for i, c in enumerate(t.ground_truth.flat_calls())
        ])
        for t in tasks
    ]  # fmt: skip
    env = factory.make(name)

    # steps/s through the environment
    def steps() -> int:
        n = 0
        for gt, calls in episodes:
            env.reset(gt)
            for c in calls:
                env.step([c])
                n += 1
        return n

    # baseline: the tool functions alone, on a fresh copy of the state per episode
    impls = {t.name: t for t in domain.tools}
    base = domain.base_snapshot(0)
    plain = [(calls, [(impls[c.name], json.loads(c.arguments)) for c in calls])
             for _, calls in episodes]  # fmt: skip

    def direct() -> int:
        n = 0
        for _, pairs in plain:
            state = State.from_snapshot(base)
            for impl, args in pairs:
                with contextlib.suppress(ToolError):  # a deliberate error step
                    impl(state, args)
                n += 1
        return n

    # snapshot + write + restore (a branch), against deepcopy snapshots
    writes = [c for _, calls in episodes for c in calls if impls[c.name].writes]
    write = writes[0] if writes else episodes[0][1][0]
    env.reset(episodes[0][0])

    def branch() -> int:
        snap = env.snapshot()
        env.step([write])
        env.restore(snap)
        return 1

    def deep_branch() -> int:
        saved = copy.deepcopy(env.state())
        env.step([write])
        env.db = State(saved)  # restore from the deep copy
        return 1

    def snap_restore_only() -> int:
        env.restore(env.snapshot())
        return 1

    # hashing after a write
    env.reset(episodes[0][0])

    def incremental_hash() -> int:
        env.step([write])
        env.state_hash()
        return 1

    def full_hash() -> int:
        env.step([write])
        stable_hash(env.state())
        return 1

    out = {
        "steps_per_s": rate(steps),
        "direct_calls_per_s": rate(direct),
        "snapshot_restore_per_s": rate(snap_restore_only),
        "branch_per_s": rate(branch),
        "deepcopy_branch_per_s": rate(deep_branch),
        "hash_after_write_per_s": rate(incremental_hash),
        "full_hash_after_write_per_s": rate(full_hash),
        "records": len(State.from_snapshot(base)),
    }
    out["env_overhead"] = out["direct_calls_per_s"] / out["steps_per_s"]
    out["branch_vs_deepcopy"] = out["branch_per_s"] / out["deepcopy_branch_per_s"]
    out["hash_vs_full"] = out["hash_after_write_per_s"] / out["full_hash_after_write_per_s"]
    return out


def main() -> None:
    load = os.getloadavg()[0]
    results = {name: bench_domain(name) for name in BUILTIN_DOMAINS}
    print(f"environment benchmark, load average {load:.2f} → {os.getloadavg()[0]:.2f}")
    cols = [
        ("records", "records", "{:>8.0f}"),
        ("steps/s", "steps_per_s", "{:>10,.0f}"),
        ("direct/s", "direct_calls_per_s", "{:>10,.0f}"),
        ("snap+restore/s", "snapshot_restore_per_s", "{:>15,.0f}"),
        ("branch/s", "branch_per_s", "{:>10,.0f}"),
        ("deepcopy/s", "deepcopy_branch_per_s", "{:>11,.0f}"),
        ("hash/s", "hash_after_write_per_s", "{:>9,.0f}"),
        ("full hash/s", "full_hash_after_write_per_s", "{:>12,.0f}"),
    ]
    print(f"{'domain':10}" + "".join(f"{c[0]:>{len(c[2].format(0))}}" for c in cols))
    for name, r in results.items():
        print(f"{name:10}" + "".join(fmt.format(r[key]) for _, key, fmt in cols))
    summary = {
        "bench": "env",
        "min_steps_per_s": round(min(r["steps_per_s"] for r in results.values())),
        "min_snapshot_restore_per_s": round(
            min(r["snapshot_restore_per_s"] for r in results.values())
        ),
        "min_branch_vs_deepcopy": round(min(r["branch_vs_deepcopy"] for r in results.values()), 1),
        "domains": {
            name: {k: round(v, 2) if isinstance(v, float) else v for k, v in r.items()}
            for name, r in results.items()
        },
        "load_avg": round(load, 2),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
