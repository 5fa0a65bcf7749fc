"""Whole-run reliability checks through the CLI, shared by ``tests/reliability`` (quick
versions) and ``bench/reliability.py`` (the soak):

- :func:`kill_trials` — ``kill -9`` of ``trajsynth run`` (a shipped pipeline, scaled down
  with ``--set``) at seeded random moments, then a resumed run; each trial is compared with
  an uninterrupted run: the same rows in every stage folder (count and a digest of the sorted
  ids), no temporary files left behind, and no process of the killed run still alive;
- :func:`secret_trials` — an API key given on the command line (``--set``), in the
  environment (``api_key_env``) or in the pipeline YAML, for a working endpoint, one that
  answers 401 and one that is unreachable: the key must appear in no file of the run folder
  or the cache and nowhere on the console.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

#: the shipped pipeline the kill trials run, scaled down
KILL_PIPELINE = "pipelines/echo_steca.yaml"
KILL_SETS = ("stages.tasks.with.tasks_per_domain=1", "stages.rollouts.with.n=4")


def _env(cache: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["TRAJSYNTH_CACHE_DIR"] = str(cache)
    env.update(extra or {})
    return env


def _run_cmd(pipeline: str, out: Path | str, sets: tuple[str, ...]) -> list[str]:
    cmd = [sys.executable, "-m", "trajsynth", "run", pipeline, "--out", str(out), "-q"]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def digest(out: Path) -> dict[str, tuple[int, str]]:
    """{stage folder: (rows, digest of the sorted ids)} for every folder holding shards."""
    import pyarrow.parquet as pq

    result = {}
    for folder in sorted({p.parent for p in out.rglob("part-*.parquet")}):
        ids: list[str] = []
        for f in sorted(folder.glob("part-*.parquet")):
            ids += [str(i) for i in pq.read_table(f, columns=["id"]).column("id").to_pylist()]
        h = hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()[:16]
        result[str(folder.relative_to(out))] = (len(ids), h)
    return result


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _leftovers(out: Path) -> list[str]:
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if ".tmp" in p.name)


def kill_trials(
    work: Path,
    trials: int,
    *,
    seed: int = 0,
    pipeline: str = KILL_PIPELINE,
    sets: tuple[str, ...] = KILL_SETS,
    timeout_s: float = 600,
    progress: Any = None,
    where: Any = None,
    env: dict[str, str] | None = None,
    digest_of: Any = None,
    leftovers_of: Any = None,
) -> dict[str, Any]:
    """``trials`` kill-and-resume runs against one uninterrupted run; see the module doc.
    ``progress(message)`` is told when each run ends. The run folders are ``work/<name>``,
    or ``where(name)`` (a bucket URL, say), read by ``digest_of`` and ``leftovers_of``
    (default: :func:`digest` and the temporary files of a local folder); ``env`` is added to
    the runs' environment."""
    say = progress or (lambda message: None)
    where = where or (lambda name: work / name)
    digest_of = digest_of or digest
    leftovers_of = leftovers_of or _leftovers
    rnd = random.Random(seed)
    ref_out = where("reference")
    start = time.monotonic()
    subprocess.run(
        _run_cmd(pipeline, ref_out, sets), cwd=REPO, env=_env(work / "reference-cache", env),
        check=True, timeout=timeout_s, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    ref_s = time.monotonic() - start
    reference = digest_of(ref_out)
    say(f"kill trials: uninterrupted run {ref_s:.1f} s")
    results = []
    for t in range(trials):
        out, cache = where(f"trial-{t}"), work / f"trial-{t}-cache"
        delay = rnd.uniform(0.05, 0.95) * ref_s
        proc = subprocess.Popen(
            _run_cmd(pipeline, out, sets), cwd=REPO, env=_env(cache, env),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=delay)
        finished_before_kill = proc.poll() is not None
        family = _descendants(proc.pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 5
        while any(_alive(p) for p in family) and time.monotonic() < deadline:
            time.sleep(0.1)
        orphans = [p for p in family if _alive(p)]
        for p in orphans:  # do not leave them to the rest of the suite
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        resumed = subprocess.run(
            _run_cmd(pipeline, out, sets), cwd=REPO, env=_env(cache, env), timeout=timeout_s,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        got = digest_of(out) if resumed.returncode == 0 else {}
        left = leftovers_of(out)
        same = resumed.returncode == 0 and got == reference
        say(f"kill trial {t + 1}/{trials}: killed after {delay:.1f} s, resumed, identical={same}")
        results.append(
            {
                "trial": t,
                "kill_after_s": round(delay, 2),
                "finished_before_kill": finished_before_kill,
                "identical": same,
                "orphans": len(orphans),
                "leftovers": left,
                "resume_rc": resumed.returncode,
                "resume_err": resumed.stderr[-500:] if resumed.returncode else "",
                "diff": {} if same else {k: (reference.get(k), got.get(k))
                                         for k in set(reference) | set(got)
                                         if reference.get(k) != got.get(k)},
            }
        )  # fmt: skip
    ok = sum(1 for r in results if r["identical"] and not r["orphans"] and not r["leftovers"])
    return {"trials": trials, "ok": ok, "reference_s": round(ref_s, 1), "results": results}


# --------------------------------------------------------------------------------------
# secrets
# --------------------------------------------------------------------------------------


class _Reject401(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        auth = self.headers.get("Authorization", "")
        key = auth.removeprefix("Bearer ")
        body = json.dumps(
            {
                "error": {
                    "message": f"Incorrect API key provided: {key[:3]}...{key[-4:]}",
                    "type": "invalid_request_error",
                    "code": "invalid_api_key",
                }
            }
        ).encode()
        self.send_response(401)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def reject_server() -> Any:
    """An endpoint on 127.0.0.1 that answers every request with 401."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Reject401)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _secret_pipeline(base_url: str, key_yaml: str | None, key_env: str | None) -> dict[str, Any]:
    role: dict[str, Any] = {
        "backend": "openai", "base_url": base_url, "model": "sim", "max_retries": 1,
        "timeout_s": 5, "send_metadata": True,
    }  # fmt: skip
    if key_yaml:
        role["api_key"] = key_yaml
    if key_env:
        role["api_key_env"] = key_env
    # what is checked is where the key goes, not the teacher: its one rollout may fail
    # verification (a teacher error) without the run failing
    return {
        "name": "secrets",
        "defaults": {"seed": 0, "llm": {"*": role}, "allow_unverified": True},
        "stages": [
            {"id": "tasks", "uses": "magnet_tasks",
             "with": {"tasks_per_domain": 1, "domains": ["math"],
                      "graph": {"similarity": "lexical"}}},
            {"id": "rollouts", "uses": "rejection_sampling", "from": "tasks", "with": {"n": 1}},
        ],
    }  # fmt: skip


def _grep(root: Path, needle: bytes) -> list[str]:
    hits = []
    for p in root.rglob("*"):
        if p.is_file():
            with contextlib.suppress(OSError):
                if needle in p.read_bytes():
                    hits.append(str(p))
    return hits


SECRET_CASES = tuple(
    f"{way}-{endpoint}"
    for endpoint in ("ok", "401", "unreachable")
    for way in ("flag", "env", "yaml")
)


def secret_trials(
    work: Path, base_url: str, *, cases: tuple[str, ...] = SECRET_CASES, timeout_s: float = 300
) -> dict[str, Any]:
    """Run the small LLM pipeline with a fresh key per way of passing it and per endpoint
    (``base_url``: a working one; plus a 401 and an unreachable one) and grep for the key;
    ``cases``: which ``way-endpoint`` pairs (all 9 by default)."""
    import yaml

    results = []
    with reject_server() as rejecting:
        endpoints = {"ok": base_url, "401": rejecting,
                     "unreachable": f"http://127.0.0.1:{_closed_port()}/v1"}  # fmt: skip
        for endpoint, url in endpoints.items():
            for way in ("flag", "env", "yaml"):
                name = f"{way}-{endpoint}"
                if name not in cases:
                    continue
                key = "sk-test-" + secrets.token_hex(16)
                env_name = "TRAJSYNTH_TEST_KEY_" + secrets.token_hex(3).upper()
                spec = _secret_pipeline(
                    url, key if way == "yaml" else None, env_name if way == "env" else None
                )
                spec_path = work / f"{name}.yaml"
                spec_path.write_text(yaml.safe_dump(spec))
                out, cache = work / f"{name}-run", work / f"{name}-cache"
                cmd = [sys.executable, "-m", "trajsynth", "run", str(spec_path), "--out",
                       str(out)]  # fmt: skip
                if way == "flag":
                    cmd += ["--set", f"defaults.llm.*.api_key={key}"]
                extra = {env_name: key} if way == "env" else {}
                proc = subprocess.run(
                    cmd, cwd=REPO, env=_env(cache, extra), capture_output=True,
                    timeout=timeout_s,
                )  # fmt: skip
                needle = key.encode()
                spec_path.unlink()  # the YAML holds the key on purpose
                leaks = _grep(out, needle) + _grep(cache, needle)
                if needle in proc.stdout or needle in proc.stderr:
                    leaks.append("console")
                results.append(
                    {
                        "case": name,
                        "rc": proc.returncode,
                        "leaks": leaks,
                        "tail": proc.stderr.decode(errors="replace")[-300:],
                    }
                )
    return {"cases": len(results), "leaks": sum(len(r["leaks"]) for r in results),
            "results": results}  # fmt: skip
