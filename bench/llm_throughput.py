"""LLM client throughput at the concurrency limit, and its CPU cost next to the bare SDK.

What it measures: against ``trajsynth serve --backend sim`` on loopback with a fixed
latency L, a closed loop of C workers (C requests always in flight) is run

  (a) C = 64,  L = 200 ms
  (b) C = 512, L = 2 s    (real LLM calls take seconds; this is where pools and event-loop
                           overhead show)

once with trajsynth's client (``client_for_role(...).chat``, role ``max_concurrency = C``,
response cache on, as a pipeline runs it) and once with a bare ``openai.AsyncOpenAI`` loop
(SDK defaults) against the same server in the same run. For each it reports

  efficiency         achieved requests/s ÷ (C ÷ L): 1.0 means no request waited for anything
                     but the server's latency;
  client CPU ms/req  process CPU time of this (client) process per request;
  server CPU ms/req  CPU time of the server process per request (from /proc), because on two
                     cores client and server share the CPU and a heavy server would be the
                     bottleneck.

Targets: efficiency ≥ 0.95 in both scenarios; our CPU per request ≤ 1.2 × the bare SDK's.
Each run starts after a warm-up round that opens the connections. Requests are all distinct
(nothing is answered from the cache). The last line printed is one JSON object with the
figures.

Run: PYTHONPATH=. python bench/llm_throughput.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from trajsynth.llm import aclose, client_for_role, reset_clients  # noqa: E402
from trajsynth.llm.server import ServeProcess, spawn_server  # noqa: E402


@dataclass
class Result:
    name: str
    inflight: int
    latency_s: float
    requests: int
    wall_s: float
    client_cpu_s: float
    server_cpu_s: float
    errors: int

    @property
    def efficiency(self) -> float:
        return (self.requests / self.wall_s) / (self.inflight / self.latency_s)

    @property
    def client_ms(self) -> float:
        return 1000 * self.client_cpu_s / self.requests

    @property
    def server_ms(self) -> float:
        return 1000 * self.server_cpu_s / self.requests


def _proc_cpu(pid: int) -> float:
    """utime + stime of a process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _closed_loop(send, inflight: int, per_worker: int, tag: str) -> int:
    """C workers, each sending ``per_worker`` requests one after another; returns errors."""
    errors = 0

    async def worker(w: int) -> None:
        nonlocal errors
        for k in range(per_worker):
            ok = await send([{"role": "user", "content": f"{tag} worker {w} request {k}"}])
            errors += not ok

    await asyncio.gather(*(worker(w) for w in range(inflight)))
    return errors


def run_ours(base_url: str, inflight: int, per_worker: int, cache_dir: str, tag: str) -> tuple:
    reset_clients()
    client = client_for_role(
        "teacher",
        {
            "teacher": {
                "backend": "openai",
                "base_url": base_url,
                "model": "sim",
                "max_concurrency": inflight,
                "cache": True,
                "cache_dir": cache_dir,
            }
        },
    )

    async def send(messages) -> bool:
        return (await client.chat(messages)).ok

    async def main() -> tuple[float, float, int]:
        await _closed_loop(send, inflight, 1, f"warmup-{tag}")
        c0, t0 = time.process_time(), time.perf_counter()
        errors = await _closed_loop(send, inflight, per_worker, tag)
        out = time.perf_counter() - t0, time.process_time() - c0, errors
        await aclose()
        return out

    return asyncio.run(main())


def run_sdk(base_url: str, inflight: int, per_worker: int) -> tuple:
    import openai

    async def main() -> tuple[float, float, int]:
        client = openai.AsyncOpenAI(base_url=base_url, api_key="sk-bench", max_retries=0)

        async def send(messages) -> bool:
            r = await client.chat.completions.create(model="sim", messages=messages)
            return bool(r.choices)

        await _closed_loop(send, inflight, 1, "warmup-sdk")
        c0, t0 = time.process_time(), time.perf_counter()
        errors = await _closed_loop(send, inflight, per_worker, "sdk")
        out = time.perf_counter() - t0, time.process_time() - c0, errors
        await client.close()
        return out

    return asyncio.run(main())


def measure(
    name: str,
    server: ServeProcess,
    inflight: int,
    latency_s: float,
    per_worker: int,
    cache_dir: str,
    run: int,
) -> Result:
    proc, base_url = server.proc, server.base_url
    s0 = _proc_cpu(proc.pid)
    if name == "ours":
        # every request distinct (run index in the text): the cache stores, never answers
        wall, cpu, errors = run_ours(base_url, inflight, per_worker, cache_dir, f"ours{run}")
    else:
        wall, cpu, errors = run_sdk(base_url, inflight, per_worker)
    server = _proc_cpu(proc.pid) - s0
    # the server's CPU over the measured part only: subtract the warm-up share
    share = per_worker / (per_worker + 1)
    return Result(
        name, inflight, latency_s, inflight * per_worker, wall, cpu, server * share, errors
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    args = ap.parse_args()
    scenarios = [(64, 200, 4 if args.quick else 15), (512, 2000, 1 if args.quick else 3)]
    results: list[Result] = []
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        for inflight, latency_ms, per_worker in scenarios:
            args = ("--backend", "sim", "--latency-ms", str(latency_ms))
            with spawn_server(*args) as server:
                for run, name in enumerate(("sdk", "ours", "sdk", "ours")):
                    results.append(
                        measure(name, server, inflight, latency_ms / 1000, per_worker, tmp, run)
                    )

    def best(name: str, inflight: int) -> Result:
        runs = [r for r in results if r.name == name and r.inflight == inflight]
        return max(runs, key=lambda r: r.efficiency)

    print(
        f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}  (cpus: {os.cpu_count()})"
    )
    print(
        f"{'client':6} {'in flight':>9} {'latency':>8} {'requests':>8} {'wall s':>7} "
        f"{'req/s':>7} {'efficiency':>10} {'client ms/req':>13} {'server ms/req':>13} {'errors':>6}"
    )
    for r in results:
        print(
            f"{r.name:6} {r.inflight:9d} {r.latency_s:7.1f}s {r.requests:8d} {r.wall_s:7.2f} "
            f"{r.requests / r.wall_s:7.1f} {r.efficiency:10.3f} {r.client_ms:13.3f} "
            f"{r.server_ms:13.3f} {r.errors:6d}"
        )
    a_ours, b_ours = best("ours", 64), best("ours", 512)
    a_sdk, b_sdk = best("sdk", 64), best("sdk", 512)
    ours_cpu = (a_ours.client_cpu_s + b_ours.client_cpu_s) / (a_ours.requests + b_ours.requests)
    sdk_cpu = (a_sdk.client_cpu_s + b_sdk.client_cpu_s) / (a_sdk.requests + b_sdk.requests)
    server_cpu = sum(r.server_cpu_s for r in results) / sum(r.requests for r in results)
    figures = {
        "bench": "llm_throughput",
        "efficiency_64": round(a_ours.efficiency, 3),
        "efficiency_512": round(b_ours.efficiency, 3),
        "sdk_efficiency_64": round(a_sdk.efficiency, 3),
        "sdk_efficiency_512": round(b_sdk.efficiency, 3),
        "cpu_ms_per_request": round(1000 * ours_cpu, 3),
        "sdk_cpu_ms_per_request": round(1000 * sdk_cpu, 3),
        "cpu_ratio_vs_sdk": round(ours_cpu / sdk_cpu, 3),
        "server_cpu_ms_per_request": round(1000 * server_cpu, 3),
        "errors": sum(r.errors for r in results),
        "load_avg_1m": round(load[0], 2),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
