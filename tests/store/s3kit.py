"""A local S3-compatible server for tests and benches: moto's server mode on 127.0.0.1, a
free port, one bucket; and a two-node Ray cluster on this machine (``ray start --head`` and a
second ``ray start --address``, each with its own temporary folder), both stopped by the
process ids they started (never by name).

    with S3Server() as s3:                     # environment for clients: s3.env
        s3.bucket("runs")                      # s3://runs/...
    with RayCluster(env=s3.env) as cluster:    # cluster.address, cluster.env
        ...
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop_group(proc: subprocess.Popen, timeout: float = 20) -> None:
    """SIGTERM, then SIGKILL, to the process group this test started (its own session)."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


class S3Server:
    """moto's S3 server (``python -m moto.server``) on 127.0.0.1 and a free port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.env = {
            "AWS_ENDPOINT_URL_S3": self.endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
        self.proc: subprocess.Popen | None = None

    def start(self) -> S3Server:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(self.endpoint, timeout=1).read()
                return self
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError("moto server exited at start") from None
                time.sleep(0.2)
        raise RuntimeError("moto server did not answer within 60 s")

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )

    def bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        return f"s3://{name}"

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = (
            self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        )
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    def digest(self, url: str) -> dict[str, tuple[int, str]]:
        """{stage folder: (rows, digest of the sorted ids)} of every folder of shards under
        ``url`` (what ``runkit.digest`` says of a local run folder)."""
        import hashlib
        import io

        import pyarrow.parquet as pq

        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        prefix = prefix.rstrip("/") + "/"
        client = self.client()
        folders: dict[str, list[str]] = {}
        for key in self.keys(bucket, prefix):
            name = key.rsplit("/", 1)[-1]
            if name.startswith("part-") and name.endswith(".parquet"):
                folder = key[len(prefix) :].rsplit("/", 1)[0] if "/" in key[len(prefix) :] else "."
                body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
                ids = pq.read_table(io.BytesIO(body), columns=["id"]).column("id").to_pylist()
                folders.setdefault(folder, []).extend(str(i) for i in ids)
        return {
            folder: (len(ids), hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()[:16])
            for folder, ids in sorted(folders.items())
        }

    def stop(self) -> None:
        if self.proc is not None:
            _stop_group(self.proc)
            self.proc = None

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class RayCluster:
    """Two Ray nodes on this machine that share no folder: a head (``--temp-dir`` A) and a
    worker node joined by address (``--temp-dir`` B), ``num_cpus`` each, token auth with a
    token made here. Each runs in the foreground (``--block``) in its own process group."""

    def __init__(self, work: Path, *, env: dict[str, str], num_cpus: int = 1) -> None:
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.work = work
        self.num_cpus = num_cpus
        self.env = {
            **os.environ,
            **env,
            "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": secrets.token_hex(16),
            "RAY_USAGE_STATS_ENABLED": "0",
            "TRAJSYNTH_RAY_ADDRESS": self.address,
        }
        self.procs: list[subprocess.Popen] = []
        # short folders of their own: Ray's socket paths must stay under 107 bytes
        import tempfile

        self.temp_dirs = [Path(tempfile.mkdtemp(prefix=f"ray{i}-", dir="/tmp")) for i in (0, 1)]

    def _ray(self) -> str:
        return str(Path(sys.executable).with_name("ray"))

    def _start(self, args: list[str], log: Path) -> None:
        self.procs.append(
            subprocess.Popen(
                [self._ray(), "start", "--block", "--disable-usage-stats", *args],
                env=self.env,
                stdout=log.open("w"),
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )

    def alive_nodes(self) -> int:
        out = subprocess.run(
            [sys.executable, "-c", _NODES], env=self.env, capture_output=True, text=True
        )
        try:
            return int(out.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return 0

    def start(self, timeout: float = 240) -> RayCluster:
        self.work.mkdir(parents=True, exist_ok=True)
        self._start(
            [
                "--head",
                f"--port={self.port}",
                f"--num-cpus={self.num_cpus}",
                f"--temp-dir={self.temp_dirs[0]}",
                "--include-dashboard=false",
            ],
            self.work / "ray-head.log",
        )
        self._wait(1, timeout)
        self._start(
            [
                f"--address={self.address}",
                f"--num-cpus={self.num_cpus}",
                f"--temp-dir={self.temp_dirs[1]}",
            ],
            self.work / "ray-node.log",
        )
        self._wait(2, timeout)
        return self

    def _wait(self, nodes: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.procs):
                names = ("ray-head.log", "ray-node.log")
                logs = [(self.work / n).read_text()[-2000:] for n in names]
                raise RuntimeError(f"a Ray node exited: {logs}")
            if self.alive_nodes() >= nodes:
                return
            time.sleep(2)
        raise RuntimeError(f"Ray cluster did not reach {nodes} nodes in {timeout:.0f} s")

    def worker_logs(self, node: int) -> list[Path]:
        """The logs of worker processes that node ``node`` (0 head, 1 the other) started."""
        return sorted(self.temp_dirs[node].glob("session_*/logs/worker-*.out"))

    def stop(self) -> None:
        import shutil

        for proc in reversed(self.procs):
            _stop_group(proc)
        self.procs = []
        for d in self.temp_dirs:
            shutil.rmtree(d, ignore_errors=True)

    def __enter__(self) -> RayCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


_NODES = """
import os, ray
ray.init(address=os.environ["TRAJSYNTH_RAY_ADDRESS"], log_to_driver=False)
print(sum(1 for n in ray.nodes() if n["Alive"]))
"""
