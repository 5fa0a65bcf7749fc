"""``train_sft`` / ``train_grpo`` as stages: a user error (no rows, no checkpoint to start GRPO
from) is one clear message; SFT writes a model folder into the stage's artifacts and a warm
start continues from the needed checkpoint. (The loop's use of them runs in
tests/integration/test_looptool_pipeline.py.)

Run: PYTHONPATH=. python -m pytest tests/stages/test_train_stages.py -q
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from trajsynth.core import ConfigError, DataError, to_batch
from trajsynth.envs import EnvFactory
from trajsynth.stages import Context, ContextSpec, build_stage
from trajsynth.train.synth import env_maker, gold_trajectory

FACTORY = EnvFactory()
TASK = next(t for t in FACTORY.example_tasks("travel") if t.task_id == "travel-convert")
ROW = TASK.to_trajectory(FACTORY.toolset("travel"))
ROW = ROW.derive(tools=[t for t in ROW.tools if t["function"]["name"] == "convert_currency"])
TINY = {
    "hidden_size": 32,
    "num_layers": 1,
    "num_heads": 2,
    "num_kv_heads": 2,
    "intermediate_size": 64,
    "vocab_size": 400,
}


def test_train_stages_report_user_errors(tmp_path: Path) -> None:
    ctx = Context(ContextSpec(stage_id="train", artifacts_dir=str(tmp_path / "a")))
    with pytest.raises(DataError, match="no trajectories"):
        list(build_stage("train_sft", {}).process(iter([to_batch([ROW])]), ctx))
    with pytest.raises(ConfigError, match="needs:"):
        list(build_stage("train_grpo", {}).process(iter([to_batch([ROW])]), ctx))


def test_train_sft_writes_a_checkpoint_and_warm_starts(tmp_path: Path) -> None:
    gold = gold_trajectory(ROW, env_maker())
    cfg = {"sft": {"epochs": 1, "tiny": TINY, "max_len": 1024}}
    first = Context(ContextSpec(stage_id="r1", artifacts_dir=str(tmp_path / "r1")))
    list(build_stage("train_sft", cfg).process(iter([to_batch([gold] * 4)]), first))
    assert (tmp_path / "r1" / "config.json").exists() and first.metrics.values["steps"] >= 1
    second = Context(
        ContextSpec(
            stage_id="r2",
            artifacts_dir=str(tmp_path / "r2"),
            artifacts_in={"r1": str(tmp_path / "r1")},
        )
    )
    list(
        build_stage("train_sft", {**cfg, "warm_lr": 1e-3}).process(
            iter([to_batch([gold] * 4)]), second
        )
    )
    state = json.loads((tmp_path / "r2" / "trajsynth_sft.json").read_text())
    assert state["config"]["model"] == str(tmp_path / "r1") and state["config"]["lr"] == 1e-3
    assert second.metrics.values["warm_start"] is True


def test_train_sft_says_when_it_ignores_the_rows_weights(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Rows weighted by ``extra.weight`` (single_turn's ``repeat_as: weight``) trained without
    ``sft.weights``: the run goes on and says how many weights it ignores; with it, silence."""
    gold = gold_trajectory(ROW, env_maker())
    rows = [gold.derive(id=f"g{i}", extra={"weight": 2} if i < 3 else {}) for i in range(4)]
    for weights, expected in ((False, ["3 of 4 rows carry a sample weight"]), (True, [])):
        caplog.clear()
        cfg = {"sft": {"epochs": 1, "tiny": TINY, "max_len": 1024, "weights": weights}}
        ctx = Context(ContextSpec(stage_id="t", artifacts_dir=str(tmp_path / str(weights))))
        with caplog.at_level("WARNING"):
            list(build_stage("train_sft", cfg).process(iter([to_batch(rows)]), ctx))
        said = [r.getMessage() for r in caplog.records if "sample weight" in r.getMessage()]
        assert [e for e in expected if any(e in m for m in said)] == expected
        assert len(said) == len(expected)


def test_train_sft_says_which_rows_max_len_left_out(tmp_path: Path) -> None:
    """A row whose first assistant message starts past ``max_len`` cannot be trained on: the
    stage counts it (``rows_cut_off``) and its findings say so, with the length that keeps it;
    rows that fit leave it with none."""
    gold = gold_trajectory(ROW, env_maker())
    first_user = next(i for i, m in enumerate(gold.messages) if m.role == "user")
    messages = list(gold.messages)
    request = messages[first_user]
    words = "Please, " + "and I mean it, " * 60 + (request.content or "")
    messages[first_user] = request.model_copy(update={"content": words})
    rows = [gold.derive(id="short"), gold.derive(id="long", messages=messages)]
    for max_len, cut_off in ((1024, 0), (300, 1)):
        cfg = {"sft": {"epochs": 1, "tiny": TINY, "max_len": max_len}}
        ctx = Context(ContextSpec(stage_id="t", artifacts_dir=str(tmp_path / str(max_len))))
        stage = build_stage("train_sft", cfg)
        list(stage.process(iter([to_batch(rows)]), ctx))
        metrics = ctx.metrics.snapshot()
        assert metrics["values"]["rows_cut_off"] == cut_off
        found = stage.findings(metrics)
        if cut_off:
            assert len(found) == 1 and found[0].startswith("1 of 2 rows left out")
            assert "past max_len (300 tokens)" in found[0]
            assert found[0].endswith("raise max_len to keep them")
        else:
            assert found == []


def test_train_sft_says_how_many_rows_a_short_run_never_saw(tmp_path: Path) -> None:
    """A run stopped before one epoch (here max_steps 1 of 3 unpacked batches) keeps the counts
    as metrics and its findings say how many examples it never trained on."""
    gold = gold_trajectory(ROW, env_maker())
    rows = [gold.derive(id=f"r{i}") for i in range(3)]
    cfg = {"sft": {"epochs": 1, "tiny": TINY, "pack": False, "batch_size": 1, "max_steps": 1}}
    ctx = Context(ContextSpec(stage_id="t", artifacts_dir=str(tmp_path)))
    stage = build_stage("train_sft", cfg)
    list(stage.process(iter([to_batch(rows)]), ctx))
    values = ctx.metrics.snapshot()["values"]
    assert (values["steps"], values["planned_steps"], values["examples_unseen"]) == (1, 1, 2)
    assert stage.findings(ctx.metrics.snapshot()) == [
        "training ended after 1 step (max_steps or step_budget), 0.33 of an epoch: 2 of 3 "
        "examples were never trained on; give it more time or fewer, shorter rows"
    ]
