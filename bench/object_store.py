"""Benchmark: run folders on object storage, against moto's S3 server on 127.0.0.1.

    PYTHONPATH=. python bench/object_store.py [--kills 10] [--no-ray]

1) ``kill -9`` of ``trajsynth run pipelines/echo_steca.yaml`` (scaled down, as
   ``bench/reliability.py`` runs it locally) with ``--out s3://…`` at ``--kills`` seeded random
   moments, then a resumed run; each compared with an uninterrupted run on the bucket (rows
   and a digest of the sorted ids of every stage folder; no ``.tmp``/spill key left) and the
   uninterrupted run with the same pipeline on a local folder;
2) a two-node Ray cluster on this machine (``ray start --head`` and ``ray start --address``,
   each with its own ``--temp-dir``, one CPU each, nothing shared but the bucket) runs a
   synthetic → split → dedup → sample pipeline with ``--executor ray --out s3://…``; its ids
   are compared with the local executor's on a local folder, stage by stage.

The last line is one JSON object: ``kills``, ``kill_identical``, ``bucket_equals_local``,
``ray_nodes``, ``ray_identical``, ``ray_seconds``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "store"))
sys.path.insert(0, str(REPO / "tests" / "reliability"))

import yaml  # noqa: E402
from runkit import KILL_PIPELINE, KILL_SETS, _run_cmd, digest, kill_trials  # noqa: E402
from s3kit import RayCluster, S3Server  # noqa: E402

RAY_PIPE = {
    "name": "objstore",
    "defaults": {
        "seed": 3,
        "shard_rows": 150,
        "pool_min_rows": 0,
        "workers": 1,
        "allow_unverified": True,
    },
    "stages": [
        {"id": "raw", "uses": "synthetic", "with": {"rows": 1200, "duplicate_rate": 0.2}},
        {"id": "parts", "uses": "split", "from": "raw", "with": {"eval_fraction": 0.3}},
        {"id": "unique", "uses": "dedup", "from": "parts"},
        {"id": "pick", "uses": "sample", "from": "parts:eval", "with": {"n": 40}},
    ],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-ray", action="store_true")
    args = ap.parse_args()
    out: dict = {"kills": args.kills}
    with tempfile.TemporaryDirectory() as tmp, S3Server() as s3:
        work = Path(tmp)
        env = {**s3.env, "TRAJSYNTH_SCRATCH": str(work / "scratch")}
        bucket = s3.bucket("bench")
        # 1) kill -9 and resume on the bucket
        start = time.monotonic()
        report = kill_trials(
            work,
            args.kills,
            seed=args.seed,
            where=lambda name: f"{bucket}/{name}",
            env=env,
            digest_of=s3.digest,
            leftovers_of=lambda url: [
                k
                for k in s3.keys("bench", url.removeprefix(bucket + "/") + "/")
                if ".tmp" in k or ".spill" in k
            ],
            progress=lambda m: print(m, flush=True),
        )
        out["kill_identical"] = report["ok"]
        out["kill_seconds"] = round(time.monotonic() - start, 1)
        subprocess.run(
            _run_cmd(KILL_PIPELINE, work / "local", KILL_SETS),
            cwd=REPO,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        out["bucket_equals_local"] = digest(work / "local") == s3.digest(f"{bucket}/reference")
        # 2) two Ray nodes sharing only the bucket
        if not args.no_ray:
            pipe = work / "pipe.yaml"
            pipe.write_text(yaml.safe_dump(RAY_PIPE))
            subprocess.run(
                [sys.executable, "-m", "trajsynth", "run", str(pipe), "-q", "--out",
                 str(work / "ray-local")],
                cwd=REPO, check=True, stdout=subprocess.DEVNULL,
            )  # fmt: skip
            with RayCluster(work / "cluster", env=env) as cluster:
                out["ray_nodes"] = cluster.alive_nodes()
                start = time.monotonic()
                res = subprocess.run(
                    [sys.executable, "-m", "trajsynth", "run", str(pipe), "-q", "--executor",
                     "ray", "--out", f"{bucket}/ray"],
                    cwd=work, env=cluster.env, capture_output=True, text=True,
                )  # fmt: skip
                out["ray_seconds"] = round(time.monotonic() - start, 1)
                out["ray_workers_per_node"] = [
                    len(cluster.worker_logs(0)),
                    len(cluster.worker_logs(1)),
                ]
            if res.returncode != 0:
                print(res.stderr[-3000:])
            local = digest(work / "ray-local")
            remote = s3.digest(f"{bucket}/ray")
            out["ray_identical"] = res.returncode == 0 and local == remote
    print()
    print(f"{'measure':<28}{'value':>12}")
    for k, v in out.items():
        print(f"{k:<28}{v!s:>12}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
