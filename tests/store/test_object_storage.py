"""Run folders and shards on object storage (``s3://``), against a local S3-compatible server
(moto's server mode on 127.0.0.1, started and stopped here; ``s3kit.py``).

- shards are write-once keys, read whole and checked against their run's record;
- the manifest is committed by a conditional write: a second writer is stopped;
- a pipeline (a source, a map stage with a side output, a streaming dedup with spill files,
  LLM rollouts with their response cache) writes the same rows to a bucket as to a local
  folder, and a rerun reuses every stage;
- ``kill -9`` at random moments and a resume give the rows of an uninterrupted run;
- a two-node Ray cluster on this machine (``ray start --head`` and ``ray start --address``,
  different temporary folders, nothing shared but the bucket) gives the local executor's ids;
- unreachable storage, no such bucket, no credentials: one message naming the URL, exit 2,
  nothing written.

Run: python -m pytest tests/store/test_object_storage.py -q
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("moto")
pytest.importorskip("s3fs")
pytest.importorskip("upath")

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reliability"))

from s3kit import REPO, RayCluster, S3Server

from trajsynth.core.errors import ConcurrentCommitError, DataError
from trajsynth.pipeline import run_pipeline
from trajsynth.pipeline.spec import resolve_pipeline
from trajsynth.store import read_table
from trajsynth.store.manifest import RunManifest, StageState
from trajsynth.store.shards import ShardWriter, list_shards, write_shard


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory):
    import s3fs

    server = S3Server().start()
    env = {**server.env, "TRAJSYNTH_SCRATCH": str(tmp_path_factory.mktemp("scratch"))}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    s3fs.S3FileSystem.clear_instance_cache()  # an earlier server's endpoint is not reused
    try:
        yield server
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        s3fs.S3FileSystem.clear_instance_cache()
        server.stop()


@pytest.fixture
def bucket(s3: S3Server, request: pytest.FixtureRequest) -> str:
    import re

    name = "t-" + re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[:50].strip("-")
    return s3.bucket(name)


def _rows(n: int, seed: int = 0) -> list[dict]:
    return [
        {"id": f"r{seed}-{i}", "task_id": f"t{i}", "goal": f"goal {i}", "domain": "math"}
        for i in range(n)
    ]


def test_shards_round_trip_and_a_changed_object_is_caught(s3: S3Server, bucket: str) -> None:
    folder = f"{bucket}/data"
    with ShardWriter(folder, shard_rows=4) as w:
        w.write(_rows(10))
    assert [s.file for s in w.shards] == [f"part-0000{i}.parquet" for i in range(3)]
    RunManifest(
        pipeline="p",
        stages={
            "data": StageState(
                uses="synthetic",
                outputs={"main": {"shards": [s.__dict__ for s in w.shards]}},
            )
        },
    ).save(f"{bucket}/manifest.json")
    shards = list_shards(folder)
    assert [str(p) for p in shards] == [f"{folder}/part-0000{i}.parquet" for i in range(3)]
    assert read_table(folder).column("id").to_pylist() == [f"r0-{i}" for i in range(10)]
    # a shard rewritten behind the run's back (same rows, other bytes) is refused by name
    key = "data/part-00001.parquet"
    data = s3.client().get_object(Bucket=bucket[5:], Key=key)["Body"].read()
    s3.client().put_object(Bucket=bucket[5:], Key=key, Body=data[:-8] + b"\0" * 8)
    with pytest.raises(DataError, match=r"part-00001\.parquet: corrupt shard"):
        read_table(folder)


def test_shard_keys_are_write_once(bucket: str) -> None:
    import pyarrow as pa

    from trajsynth.core.batch import conform

    table = conform(pa.Table.from_pylist(_rows(2)))
    write_shard(table, f"{bucket}/x/part-00000.parquet")
    with pytest.raises(ConcurrentCommitError, match="already exists"):
        write_shard(table, f"{bucket}/x/part-00000.parquet")


@pytest.mark.parametrize("where", ["s3", "local"])
def test_the_manifest_is_a_conditional_commit(bucket: str, tmp_path: Path, where: str) -> None:
    path = f"{bucket}/run/manifest.json" if where == "s3" else tmp_path / "manifest.json"
    RunManifest(pipeline="p").save(path)
    first, second = RunManifest.load(path), RunManifest.load(path)
    first.stages["a"] = StageState(uses="sample")
    first.save(path)
    first.save(path)  # its own commits follow each other
    second.stages["b"] = StageState(uses="sample")
    with pytest.raises(ConcurrentCommitError, match="another process committed"):
        second.save(path)
    assert list(RunManifest.load(path).stages) == ["a"]
    with pytest.raises(ConcurrentCommitError):  # creating over an existing manifest
        RunManifest(pipeline="q").save(path)


PIPE = {
    "name": "objstore",
    "defaults": {
        "seed": 3,
        "shard_rows": 150,
        "pool_min_rows": 0,
        "workers": 2,
        "allow_unverified": True,  # synthetic rows: half are marked failed
    },
    "stages": [
        {"id": "raw", "uses": "synthetic", "with": {"rows": 600, "duplicate_rate": 0.2}},
        {"id": "parts", "uses": "split", "from": "raw", "with": {"eval_fraction": 0.3}},
        {"id": "unique", "uses": "dedup", "from": "parts"},
        {"id": "pick", "uses": "sample", "from": "parts:eval", "with": {"n": 40}},
    ],
}
STAGES = ("raw", "parts", "parts/eval", "unique", "pick")


def _ids(where: str | Path, stage: str) -> list[str]:
    return sorted(read_table(f"{where}/{stage}", columns=["id"]).column("id").to_pylist())


def test_a_pipeline_on_s3_writes_what_it_writes_locally(
    s3: S3Server, bucket: str, tmp_path: Path
) -> None:
    local = run_pipeline(resolve_pipeline(PIPE), out=tmp_path / "local")
    remote = run_pipeline(resolve_pipeline(PIPE), out=f"{bucket}/run")
    assert remote.executed == local.executed == ["raw", "parts", "unique", "pick"]
    for stage in STAGES:
        assert _ids(f"{bucket}/run", stage) == _ids(tmp_path / "local", stage), stage
    dropped = remote.manifest.stages["unique"].metrics["counters"]
    assert dropped == local.manifest.stages["unique"].metrics["counters"]
    keys = s3.keys(bucket[5:])
    assert "run/manifest.json" in keys and "run/logs/run.log" in keys
    assert not [k for k in keys if ".spill" in k or ".tmp" in k]
    again = run_pipeline(resolve_pipeline(PIPE), out=f"{bucket}/run")
    assert again.executed == [] and again.skipped == ["raw", "parts", "unique", "pick"]


def test_rollouts_and_their_llm_cache_on_s3(s3: S3Server, bucket: str, tmp_path: Path) -> None:
    """LLM rollouts on a bucket: the same rows as locally, and the answers cached in the
    bucket (a rerun from scratch on another machine, here with --force and an empty scratch
    folder, sends no request)."""
    sets = [
        "stages.tasks.with.tasks_per_domain=1",
        "stages.rollouts.with.n=2",
        "defaults.llm.*.cache=true",  # the simulator is not cached unless asked
    ]
    run_pipeline("rejection", out=tmp_path / "local", overrides=sets)
    remote = run_pipeline("rejection", out=f"{bucket}/rej", overrides=sets)
    for stage in ("tasks", "rollouts", "verified"):
        assert _ids(f"{bucket}/rej", stage) == _ids(tmp_path / "local", stage), stage
    segments = [k for k in s3.keys(bucket[5:], "rej/cache/llm/") if k.endswith(".jsonl")]
    assert segments
    scratch = os.environ["TRAJSYNTH_SCRATCH"]
    os.environ["TRAJSYNTH_SCRATCH"] = str(tmp_path / "other-machine")
    try:
        from trajsynth.llm import client as llm_client

        llm_client._REGISTRY.clear()  # a fresh process: nothing cached in memory
        rerun = run_pipeline("rejection", out=f"{bucket}/rej", overrides=sets, force=True)
    finally:
        os.environ["TRAJSYNTH_SCRATCH"] = scratch
    usage = rerun.manifest.stages["rollouts"].metrics["counters"]
    requests = sum(v for k, v in usage.items() if k.endswith(".requests"))
    hits = sum(v for k, v in usage.items() if k.endswith(".cache_hits"))
    assert requests > 0 and hits == requests
    assert _ids(f"{bucket}/rej", "verified") == _ids(tmp_path / "local", "verified")
    assert remote.manifest.stages["verified"].rows_out() == len(
        _ids(tmp_path / "local", "verified")
    )


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trajsynth", *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_unusable_storage_is_one_message_and_nothing_is_written(s3: S3Server, bucket: str) -> None:
    run = ["run", "tiny", "-q", "--set", "stages.raw.with.rows=50"]
    # no such bucket
    res = _cli([*run, "--out", "s3://no-such-bucket/run"], s3.env)
    assert res.returncode == 2, res.stderr
    assert "s3://no-such-bucket/run" in res.stderr and "no such bucket" in res.stderr
    assert "Traceback" not in res.stderr
    # no credentials anywhere
    bare = {k: v for k, v in s3.env.items() if not k.startswith("AWS_") or "ENDPOINT" in k}
    no_creds = {
        **bare,
        "AWS_ACCESS_KEY_ID": "",
        "AWS_SECRET_ACCESS_KEY": "",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
        "AWS_CONFIG_FILE": "/nonexistent",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    res = _cli([*run, "--out", f"{bucket}/nocreds"], no_creds)
    assert res.returncode == 2, res.stderr
    assert f"{bucket}/nocreds" in res.stderr and "credentials" in res.stderr
    # an endpoint that does not answer
    dead = {**s3.env, "AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9"}
    res = _cli([*run, "--out", f"{bucket}/dead"], dead)
    assert res.returncode == 2, res.stderr
    assert f"{bucket}/dead" in res.stderr and "unreachable" in res.stderr
    assert "Traceback" not in res.stderr
    # reading a missing folder of a bucket
    res = _cli(["stats", f"{bucket}/nothing-here"], s3.env)
    assert res.returncode == 2 and "does not exist" in res.stderr
    assert s3.keys(bucket[5:]) == []


@pytest.mark.slow
def test_kill_9_and_resume_on_s3_is_identical(s3: S3Server, bucket: str, tmp_path: Path) -> None:
    from runkit import kill_trials

    def leftovers(url: str) -> list[str]:
        prefix = url.removeprefix(bucket + "/")
        return [k for k in s3.keys(bucket[5:], prefix + "/") if ".tmp" in k or ".spill" in k]

    report = kill_trials(
        tmp_path,
        2,
        seed=4,
        where=lambda name: f"{bucket}/{name}",
        env=s3.env,
        digest_of=s3.digest,
        leftovers_of=leftovers,
    )
    assert report["ok"] == 2, report["results"]


@pytest.mark.slow
def test_two_ray_nodes_sharing_only_a_bucket_match_the_local_executor(
    s3: S3Server, bucket: str, tmp_path: Path
) -> None:
    pytest.importorskip("ray")
    pipe = tmp_path / "pipe.yaml"
    import yaml

    pipe.write_text(yaml.safe_dump({**PIPE, "defaults": {**PIPE["defaults"], "workers": 1}}))
    local = _cli(["run", str(pipe), "-q", "--out", str(tmp_path / "local")], {})
    assert local.returncode == 0, local.stderr
    with RayCluster(tmp_path / "cluster", env=s3.env) as cluster:
        assert cluster.alive_nodes() == 2
        res = subprocess.run(
            [sys.executable, "-m", "trajsynth", "run", str(pipe), "-q", "--executor", "ray",
             "--out", f"{bucket}/ray"],
            cwd=tmp_path, env=cluster.env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert res.returncode == 0, res.stderr[-3000:]
        # units ran as worker processes of both nodes
        assert cluster.worker_logs(0) and cluster.worker_logs(1)
    for stage in STAGES:
        assert _ids(f"{bucket}/ray", stage) == _ids(tmp_path / "local", stage), stage
    units = RunManifest.load(f"{bucket}/ray/manifest.json").stages["parts"].units
    assert len(units) == 4  # one Ray task per input shard
