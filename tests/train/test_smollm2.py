"""The pretrained student by name: SmolLM2-135M-Instruct (prepared once per session into a
temporary cache by the ``smollm2`` fixture) trains with LoRA through ``train-sft --model
smollm2-135m``, and the saved folder is a plain transformers model; ``eval`` probes it by
name; a scaled-down rejection pipeline runs with its policy role on ``backend: openai``
against ``serve --backend local --model smollm2-135m`` on 127.0.0.1, the real model's
malformed turns recorded as format errors, not crashes.

Run: PYTHONPATH=. python -m pytest tests/train/test_smollm2.py -q
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from trajsynth.cli import main  # noqa: E402
from trajsynth.store.shards import ShardWriter  # noqa: E402
from trajsynth.train.synth import env_maker, gold_trajectory, task_variants  # noqa: E402


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def _math_tasks(n: int) -> list:
    return [t for t in task_variants(40, seed=3, distractors=0) if t.domain == "math"][:n]


def test_train_sft_lora_by_name(
    smollm2: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    make_env = env_maker(200)
    rows = [gold_trajectory(t, make_env) for t in _math_tasks(2)]
    with ShardWriter(tmp_path / "data") as w:
        w.write(rows)
    out = tmp_path / "sft"
    code, stdout, err = run_cli(
        capsys, "train-sft", str(tmp_path / "data"), "--out", str(out),
        "--model", "smollm2-135m", "--lora-r", "4", "--max-steps", "1", "--batch-size", "1",
        "--max-len", "512", "--set", "reasoning=false", "--set", "tool_format=described",
        "--json",
    )  # fmt: skip
    assert code == 0, err
    result = json.loads(stdout.strip().splitlines()[-1])
    assert result["steps"] == 1 and result["first_loss"] > 0
    # a plain folder: LoRA merged, no adapter weights, the tool template kept
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        keys = list(f.keys())
        trained = f.get_tensor("model.layers.0.self_attn.q_proj.weight")
    assert keys and not any("lora" in k for k in keys)
    with safe_open(str(smollm2 / "model.safetensors"), "pt") as f:
        base = f.get_tensor("model.layers.0.self_attn.q_proj.weight")
    assert not torch.equal(trained, base)  # the merged update changed the weights
    model = AutoModelForCausalLM.from_pretrained(str(out))
    assert model.config.num_hidden_layers == 30
    assert "<tool_call>" in (out / "chat_template.jinja").read_text()
    # the tools were shown with their parameters' descriptions, and the checkpoint keeps that
    from trajsynth.llm.chat_template import template_format

    assert template_format((out / "chat_template.jinja").read_text()) == "described"


@pytest.mark.slow
def test_eval_and_serve_by_name(
    smollm2: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from trajsynth.llm.server import spawn_server

    with ShardWriter(tmp_path / "tasks") as w:
        w.write(_math_tasks(2))
    code, stdout, err = run_cli(
        capsys, "eval", "--tasks", str(tmp_path / "tasks"), "--model", "smollm2-135m",
        "--max-steps", "1", "--max-new-tokens", "12", "--json",
    )  # fmt: skip
    assert code == 0, err
    report = json.loads(stdout.strip().splitlines()[-1])
    assert report["tasks"] == 2 and 0.0 <= report["overall"]["exact_match"] <= 1.0

    # a scaled-down rejection pipeline whose policy role is the served model, over HTTP
    from trajsynth.llm.client import reset_clients
    from trajsynth.pipeline import run_pipeline
    from trajsynth.pipeline.spec import load_pipeline
    from trajsynth.store import read_records

    pipeline = Path(__file__).resolve().parents[2] / "pipelines" / "rejection.yaml"
    reset_clients()
    server = spawn_server("--backend", "local", "--model", "smollm2-135m", timeout=600)
    try:
        role = {
            "backend": "openai",
            "base_url": server.base_url,
            "model": "smollm2-135m",
            "api_key": "none",
            "max_tokens": 24,
            "cache": False,
        }
        overrides = [
            "stages.tasks.with.domains=[math]",
            "stages.tasks.with.tasks_per_domain=2",
            "stages.rollouts.with.n=1",
            "stages.rollouts.with.limits={max_steps: 2, max_steps_per_turn: 2}",
            f"defaults.llm.teacher={json.dumps(role)}",
        ]
        result = run_pipeline(load_pipeline(pipeline, overrides), out=tmp_path / "run")
        assert server.metrics()["chat_requests"] > 0
        kept = read_records(result.output("rollouts"))
        failed = read_records(result.output("rollouts", "failed"))
        assert len(kept) + len(failed) == 2  # every task rolled out, none crashed
        for row in kept + failed:
            assert any(m.role == "assistant" for m in row.messages)
            # what the model wrote that no parser could read is a recorded format error
            for err in row.format_errors:
                assert isinstance(err, str) and err
    finally:
        server.stop()
        reset_clients()
