"""Real MCP servers nobody here wrote, as a user brings them: tasks, verified rollouts, a
second run, the user's folder, and the reset path of servers with state on disk.

For each of six servers (``tests/envs/mcp_servers.py``; ``make install`` installs them:
mcp-server-time, mcp-server-git, mcp-server-sqlite from PyPI, the memory, filesystem and
everything servers from npm), on a fresh user folder (a git repository, a shop database, a
memory file, documents):

- the rejection pipeline (Magnet tasks → rejection sampling → verify → filter) with the
  server as the only domain, ``TASKS`` tasks asked, 2 rollouts each, run twice;
- ``tools``: the server's tools; ``tasks``: tasks made; ``verified``: rows of ``verified``
  that passed; ``identical``: rows of the second run's ``verified`` equal to the first's
  but for volatile parts (:mod:`trajsynth.core.volatile`); ``seconds``: the first run's wall
  time; ``tasks_per_min``; ``unchanged``: the user's folder hashes the same before and after
  both runs (every path, mode and content);
- the reset path (servers with state on disk): two episodes that each changed the server
  take turns calling a read-only tool, so every call brings the server from one episode's
  state to the other's; seconds per switch with ``reset: state`` (the copy is restored, the
  process stays warm) and with ``reset: restart`` (a new process per reset, as before this
  change), and their ratio.

Nothing here is a test: it prints a table, then one JSON line.

Run: PYTHONPATH=. python bench/byot_mcp.py [--quick] [--no-pipeline]
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.envs.mcp_servers import NAMES, folder_hash, mcp_config, missing, user_folder
from trajsynth.core.volatile import mask
from trajsynth.envs import EnvFactory
from trajsynth.pipeline import run_pipeline
from trajsynth.store import read_records

QUICK = "--quick" in sys.argv
NO_PIPELINE = "--no-pipeline" in sys.argv
TASKS = 4 if QUICK else 8
SWITCHES = {"state": 20 if QUICK else 40, "restart": 4 if QUICK else 8}
#: per stateful server: a call that changes it (episode A, episode B) and a read-only call
RESET_CALLS: dict[str, tuple[tuple[str, dict[str, Any]], tuple[str, dict[str, Any]],
                             tuple[str, dict[str, Any]]]] = {
    "git": (("git_create_branch", {"branch_name": "a"}), ("git_create_branch",
            {"branch_name": "b"}), ("git_branch", {"branch_type": "local"})),
    "sqlite": (("write_query", {"query": "INSERT INTO items (name, price) VALUES ('a', 1)"}),
               ("write_query", {"query": "DELETE FROM items WHERE id = 1"}),
               ("read_query", {"query": "SELECT COUNT(*) FROM items"})),
    "memory": (("create_entities", {"entities": [{"name": "A", "entityType": "x",
                                                  "observations": []}]}),
               ("create_entities", {"entities": [{"name": "B", "entityType": "x",
                                                  "observations": []}]}),
               ("read_graph", {})),
    "filesystem": (("write_file", {"path": "{docs}/a.txt", "content": "a"}),
                   ("write_file", {"path": "{docs}/b.txt", "content": "b"}),
                   ("list_directory", {"path": "{docs}"})),
}  # fmt: skip


def _rows(records: list[Any]) -> dict[str, Any]:
    return {
        r.id: mask(r.model_dump(mode="json", exclude={"created_at", "run_id"})) for r in records
    }


def pipeline(name: str, home: Path, out: Path) -> dict[str, Any]:
    server = json.dumps(mcp_config(name, home))
    overrides = [
        f"defaults.env.toolsets={{{name}: {{backend: mcp, mcp: {server}}}}}",
        "defaults.env.domains=[]",
        f"stages.tasks.with.tasks_per_domain={TASKS}",
        "stages.tasks.with.graph.similarity=lexical",
        "stages.rollouts.with.n=2",
    ]
    runs = []
    seconds = 0.0
    for k in ("a", "b"):
        t0 = time.perf_counter()
        try:
            result = run_pipeline("rejection", out=out / k, overrides=overrides)
        except Exception as exc:  # a server that gives no task: said in the table
            return {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        if k == "a":
            seconds = time.perf_counter() - t0
        verified_dir = result.output("verified")
        runs.append(
            {
                "tasks": read_records(result.output("tasks")),
                "verified": read_records(verified_dir)
                if any(verified_dir.glob("*.parquet"))
                else [],
            }
        )
    first, second = (_rows(r["verified"]) for r in runs)
    tools = len(runs[0]["tasks"][0].tools) if runs[0]["tasks"] else 0
    tasks = len(runs[0]["tasks"])
    return {
        "tools": tools,
        "tasks": tasks,
        "verified": sum(1 for r in runs[0]["verified"] if r.success),
        "identical": sum(1 for i, row in second.items() if first.get(i) == row),
        "rows": len(second),
        "tasks_identical": _rows(runs[0]["tasks"]) == _rows(runs[1]["tasks"]),
        "seconds": round(seconds, 1),
        "tasks_per_min": round(60 * tasks / seconds, 1) if seconds else 0.0,
    }


def _fill(args: dict[str, Any], home: Path) -> dict[str, Any]:
    return json.loads(json.dumps(args).replace("{docs}", str(home / "docs")))


def reset_path(name: str, home: Path, mode: str) -> float:
    """Seconds per switch between two episodes' states (see the module docstring)."""
    config = mcp_config(name, home) | {"reset": mode}
    factory = EnvFactory({"domains": [], "toolsets": {name: {"backend": "mcp", "mcp": config}}})
    try:
        write_a, write_b, read = RESET_CALLS[name]
        extra = {"repo_path": str(home / "repo")} if name == "git" else {}
        envs = []
        for tool, args in (write_a, write_b):
            env = factory.make(name)
            env.reset()
            result = env.call(tool, {**_fill(args, home), **extra})
            assert result.ok, result.error
            envs.append(env)
        tool, args = read
        args = {**_fill(args, home), **extra}
        envs[0].call(tool, args)  # warm: both episodes' states seen once
        envs[1].call(tool, args)
        n = SWITCHES[mode]
        t0 = time.perf_counter()
        for i in range(n):
            result = envs[i % 2].call(tool, args)
            assert result.ok, result.error
        return (time.perf_counter() - t0) / n
    finally:
        factory.close()


def main() -> None:
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="mcp-bench-") as tmp:
        root = Path(tmp)
        for name in NAMES:
            why = missing(name)
            if why:
                results[name] = {"skipped": why}
                print(f"{name:11s} skipped: {why}", flush=True)
                continue
            home = user_folder(root / name)
            before = folder_hash(home)
            row: dict[str, Any] = {}
            if not NO_PIPELINE:
                row = pipeline(name, home, root / f"run-{name}")
            if name in RESET_CALLS:
                warm = reset_path(name, home, "state")
                cold = reset_path(name, home, "restart")
                row |= {
                    "reset_state_s": round(warm, 4),
                    "reset_restart_s": round(cold, 3),
                    "reset_speedup": round(cold / warm, 1),
                }
            row["unchanged"] = folder_hash(home) == before
            results[name] = row
            print(
                f"{name:11s} "
                + "  ".join(f"{k} {v}" for k, v in row.items() if k != "error")
                + (f"  error {row['error']}" if "error" in row else ""),
                flush=True,
            )
    print(
        "\n| server | tools | tasks | verified rows | replay-identical rows | wall time | "
        "tasks/min | reset: restore / restart | user folder unchanged |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        if "skipped" in r or "error" in r:
            print(f"| {name} | {r.get('skipped') or r.get('error')} |||||||| ")
            continue
        reset = (f"{1000 * r['reset_state_s']:.0f} ms / {r['reset_restart_s']:.1f} s "
                 f"({r['reset_speedup']:.0f}x)" if "reset_speedup" in r else "-")  # fmt: skip
        print(f"| {name} | {r.get('tools', '-')} | {r.get('tasks', '-')} | "
              f"{r.get('verified', '-')} | {r.get('identical', '-')} of {r.get('rows', '-')} | "
              f"{r.get('seconds', '-')} s | {r.get('tasks_per_min', '-')} | {reset} | "
              f"{'yes' if r['unchanged'] else 'NO'} |")  # fmt: skip
    speedups = [r["reset_speedup"] for r in results.values() if "reset_speedup" in r]
    summary = {
        "servers": results,
        "min_reset_speedup": min(speedups) if speedups else None,
        "all_unchanged": all(r.get("unchanged", True) for r in results.values()),
    }
    if speedups:
        print(f"reset path: restoring the copy is {min(speedups)}x to {max(speedups)}x faster "
              "than a restart per reset")  # fmt: skip
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
