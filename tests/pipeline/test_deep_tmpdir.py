"""A temporary folder too deep for Unix sockets: the process pool and a local Ray runtime
still run (the multiprocessing forkserver and Ray put sockets there; a path past 107 bytes
made both fail with ``AF_UNIX path too long`` before the first unit).

Run: python -m pytest tests/pipeline/test_deep_tmpdir.py -q
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from trajsynth.core import sockets
from trajsynth.pipeline import run_pipeline
from trajsynth.pipeline.spec import resolve_pipeline
from trajsynth.store import read_table

PIPE = {
    "name": "deep",
    "defaults": {"seed": 3, "shard_rows": 100, "pool_min_rows": 0, "workers": 2},
    "stages": [
        {"id": "raw", "uses": "synthetic", "with": {"rows": 300}},
        {"id": "parts", "uses": "split", "from": "raw", "with": {"eval_fraction": 0.3}},
    ],
}


@pytest.fixture
def deep_tmpdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``TMPDIR`` at a folder 120 bytes deep, for this process and the ones it starts."""
    deep = tmp_path / "a-temporary-folder"
    while len(str(deep)) < 120:
        deep = deep / "deeper-still"
    deep.mkdir(parents=True)
    monkeypatch.setenv("TMPDIR", str(deep))
    monkeypatch.delenv("RAY_TMPDIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", None)  # tempfile caches the folder it found
    assert tempfile.gettempdir() == str(deep)
    return deep


def test_socket_folders_fall_back_to_a_short_one(deep_tmpdir: Path) -> None:
    assert not sockets.fits(str(deep_tmpdir), sockets.FORKSERVER_SOCKET_ROOM)
    root = sockets.socket_root(sockets.FORKSERVER_SOCKET_ROOM)
    assert root is not None and sockets.fits(root, sockets.FORKSERVER_SOCKET_ROOM)
    assert root != str(deep_tmpdir)
    ray_dir = sockets.ray_temp_dir()
    assert ray_dir is not None and ray_dir.endswith("/ray")
    assert sockets.fits(ray_dir, sockets.RAY_SOCKET_ROOM)
    # a folder short enough is kept as it is
    assert sockets.socket_root(8, "/tmp") == "/tmp"


def test_ray_keeps_a_folder_the_user_chose(
    deep_tmpdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAY_TMPDIR", str(deep_tmpdir))
    assert sockets.ray_temp_dir() is None


def _run(out: Path, *overrides: str) -> dict[str, list[str]]:
    result = run_pipeline(resolve_pipeline(PIPE, overrides=list(overrides)), out=out)
    assert result.executed == ["raw", "parts"]
    return {
        stage: sorted(read_table(out / stage, columns=["id"]).column("id").to_pylist())
        for stage in ("parts", "parts/eval")
    }


def test_the_process_pool_runs_under_a_deep_temporary_folder(
    deep_tmpdir: Path, tmp_path: Path
) -> None:
    rows = _run(tmp_path / "pool")
    assert len(rows["parts"]) + len(rows["parts/eval"]) == 300
    assert rows == _run(tmp_path / "inline", "defaults.pool_min_rows=100000")


@pytest.mark.slow
def test_a_local_ray_runtime_starts_under_a_deep_temporary_folder(
    deep_tmpdir: Path, tmp_path: Path
) -> None:
    ray = pytest.importorskip("ray")
    assert not ray.is_initialized()
    try:
        rows = _run(tmp_path / "ray", "defaults.executor=ray")
    finally:
        ray.shutdown()
    assert rows == _run(tmp_path / "local")
