"""Sandbox latency and throughput for a trivial ``print(1+1)``.

Why: rollouts and execution-checked stages run untrusted code thousands of times; isolation
must not cost a Python start-up per execution. Measured, in one run:

- baseline: ``subprocess.run([python, "-c", "print(1+1)"])`` per execution (no isolation),
  one at a time (latency) and with as many threads as CPUs (throughput);
- cold: an isolated execution with no warm worker (the pool keeps none, ``pool_size=0``):
  a new worker is forked from the zygote (or exec'd by bubblewrap), isolates itself, runs
  the code, and is stopped in the background; ``cold_first_ms`` also includes starting the
  sandbox itself (the zygote) for its very first execution;
- warm: executions on a warm pool of one worker per CPU, one at a time (latency) and with
  two threads per worker (throughput, executions/s).

Targets: >= 500 isolated executions/s warm on 2 cores; cold <= 20 ms. Each
available isolation kind is measured; the JSON's top-level figures are for the kind
``auto`` picks. Nothing here is a test: it prints a table, then one JSON line.

Run: PYTHONPATH=. python bench/sandbox.py [--quick]
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from trajsynth.envs.sandbox import Sandbox

CODE = "print(1+1)"
QUICK = "--quick" in sys.argv
CPUS = os.cpu_count() or 1


def timed(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def throughput(fn, n: int, threads: int) -> float:
    lock = threading.Lock()
    left = [n]

    def worker() -> None:
        while True:
            with lock:
                if left[0] == 0:
                    return
                left[0] -= 1
            fn()

    t = time.perf_counter()
    with ThreadPoolExecutor(threads) as ex:
        for f in [ex.submit(worker) for _ in range(threads)]:
            f.result()
    return n / (time.perf_counter() - t)


def baseline() -> dict[str, float]:
    def once() -> None:
        r = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True)
        assert r.stdout == "2\n"

    lat = timed(once, 10 if QUICK else 30)
    return {
        "ms": statistics.median(lat) * 1000,
        "exec_per_s": throughput(once, 20 if QUICK else 60, CPUS),
    }


def measure(kind: str) -> dict[str, float | str]:
    # cold: the first execution of a new sandbox, then executions without a warm worker
    t = time.perf_counter()
    box = Sandbox(kind=kind, pool_size=0)
    first = box.run(CODE)
    cold_first = time.perf_counter() - t
    assert first.stdout == "2\n", first
    isolation = first.isolation

    def cold_once() -> None:
        r = box.run(CODE)
        assert r.stdout == "2\n", r

    cold = timed(cold_once, 10 if QUICK else 40)
    box.close()
    # warm: one worker per CPU
    warm_box = Sandbox(kind=kind, pool_size=CPUS).start()

    def warm_once() -> None:
        r = warm_box.run(CODE)
        assert r.stdout == "2\n", r

    throughput(warm_once, 4 * CPUS, 2 * CPUS)  # every worker started and warmed
    warm = timed(warm_once, 50 if QUICK else 200)
    rate = max(throughput(warm_once, 300 if QUICK else 1500, 2 * CPUS) for _ in range(2))
    warm_box.close()
    return {
        "isolation": isolation,
        "cold_first_ms": cold_first * 1000,
        "cold_ms": statistics.median(cold) * 1000,
        "cold_p90_ms": sorted(cold)[int(len(cold) * 0.9)] * 1000,
        "warm_latency_ms": statistics.median(warm) * 1000,
        "warm_exec_per_s": rate,
    }


def main() -> None:
    load_before = os.getloadavg()[0]
    base = baseline()
    kinds = ["namespace"] + (["bwrap"] if shutil.which("bwrap") else []) + ["rlimit"]
    results = {kind: measure(kind) for kind in kinds}
    auto = Sandbox().start()
    auto_kind = auto.isolation
    auto.close()
    load_after = os.getloadavg()[0]

    print(f"sandbox benchmark: {CODE!r}, {CPUS} CPUs, load average {load_before:.2f} → "
          f"{load_after:.2f}")  # fmt: skip
    header = f"{'':28}{'cold first':>12}{'cold':>10}{'cold p90':>10}{'warm':>10}{'warm exec/s':>13}"
    print(header)
    print(f"{'subprocess.run (baseline)':28}{'':>12}{base['ms']:>8.1f}ms{'':>10}{'':>10}"
          f"{base['exec_per_s']:>13.0f}")  # fmt: skip
    for kind, r in results.items():
        label = f"{kind}{' (auto)' if kind == auto_kind else ''}"
        print(f"{label:28}{r['cold_first_ms']:>10.1f}ms{r['cold_ms']:>8.1f}ms"
              f"{r['cold_p90_ms']:>8.1f}ms{r['warm_latency_ms']:>8.2f}ms"
              f"{r['warm_exec_per_s']:>13.0f}")  # fmt: skip
    top = results[auto_kind]
    print(
        f"targets: warm >= 500 exec/s: {top['warm_exec_per_s']:.0f}; cold <= 20 ms: "
        f"{top['cold_ms']:.1f} ms ({auto_kind})"
    )
    summary = {
        "bench": "sandbox",
        "isolation": auto_kind,
        "warm_exec_per_s": round(top["warm_exec_per_s"], 1),
        "warm_latency_ms": round(top["warm_latency_ms"], 3),
        "cold_ms": round(top["cold_ms"], 2),
        "cold_first_ms": round(top["cold_first_ms"], 2),
        "baseline_exec_per_s": round(base["exec_per_s"], 1),
        "baseline_ms": round(base["ms"], 2),
        "warm_vs_baseline": round(top["warm_exec_per_s"] / base["exec_per_s"], 2),
        "cold_vs_baseline": round(base["ms"] / top["cold_ms"], 2),
        "kinds": {
            k: {m: (round(v, 2) if isinstance(v, float) else v) for m, v in r.items()}
            for k, r in results.items()
        },
        "cpus": CPUS,
        "load_avg": [round(load_before, 2), round(load_after, 2)],
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
