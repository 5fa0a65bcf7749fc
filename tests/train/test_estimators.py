"""The estimators inside the trainer: step labels and a PRM trained on them (held-out AUC),
one update of every estimator on the tiny student, and every bad input refused with one
message before the first rollout.

Run: python -m pytest tests/train/test_estimators.py -q
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from typer.testing import CliRunner  # noqa: E402

from trajsynth.cli import app  # noqa: E402
from trajsynth.store.shards import ShardWriter  # noqa: E402
from trajsynth.train.agent_prm import PRMConfig, StepScorer, step_labels, train_prm  # noqa: E402
from trajsynth.train.synth import env_maker, gold_trajectory, task_variants  # noqa: E402

FAMILIES = ["travel-convert", "math-marathon-miles", "commerce-order-status"]


def write_records(rows, folder: Path) -> None:
    with ShardWriter(folder) as w:
        w.write(rows)


@pytest.fixture(scope="module")
def make_env():
    return env_maker(300)


@pytest.fixture(scope="module")
def tasks():
    return task_variants(40, seed=1, task_ids=FAMILIES, distractors=2)


@pytest.fixture(scope="module")
def gold(tasks, make_env):
    return [gold_trajectory(t, make_env) for t in tasks]


@pytest.fixture(scope="module")
def student(tmp_path_factory, gold) -> Path:
    """The tiny student with random weights (a tokenizer trained on the gold rows)."""
    from trajsynth.train.tiny import TinyConfig, build_tiny

    out = tmp_path_factory.mktemp("student")
    return build_tiny(gold, out, TinyConfig(vocab_size=500, hidden_size=32, intermediate_size=64))


def _corrupt(row, k: int):
    """The first call made wrong: another offered tool (k even) or a wrong value (k odd)."""
    msgs = [m.model_copy(deep=True) for m in row.messages]
    a = next(i for i, m in enumerate(msgs) if m.role == "assistant" and m.tool_calls)
    call = msgs[a].tool_calls[0]
    others = [t["function"]["name"] for t in row.tools if t["function"]["name"] != call.name]
    if k % 2 == 0 and others:
        call = call.model_copy(update={"name": others[0]})
    else:
        args = json.loads(call.arguments)
        key = sorted(args)[0]
        args[key] = "zzz" if isinstance(args[key], str) else (args[key] or 0) + 7
        call = call.model_copy(update={"arguments": json.dumps(args)})
    msgs[a] = msgs[a].model_copy(update={"tool_calls": [call]})
    return row.derive(id=row.id + "-bad", messages=msgs)


@pytest.fixture(scope="module")
def prm_dir(tmp_path_factory, gold, student) -> tuple[Path, object]:
    rows = gold + [_corrupt(g, k) for k, g in enumerate(gold)]
    out = tmp_path_factory.mktemp("prm")
    cfg = PRMConfig(model=str(student), labels="verifier", epochs=100, holdout=0.3)
    return out, train_prm(rows, out, cfg)


def test_step_labels_from_steca_values_and_verifier_outcomes(gold) -> None:
    row = gold[0]  # a call step, then the final answer
    assert step_labels(row, "verifier") == [1.0, 1.0]
    bad = _corrupt(row, 1)
    assert step_labels(bad, "verifier") == [0.0, 1.0]
    # a STeCa row: Monte Carlo values on some steps, the deviated step flagged as context
    steca = bad.derive(
        step_rewards=[0.4, None], step_flags=[["deviated"], []], extra={"steca": {"t": 0}}
    )
    assert step_labels(steca, "steca") == [0.4, None]
    assert step_labels(steca, "both") == [0.4, 1.0]
    # without STeCa's record, step_rewards are not labels (a rollout's sparse reward)
    assert step_labels(bad.derive(step_rewards=[0.0, 1.0]), "steca") == [None, None]


def test_a_prm_trained_on_verifier_outcomes_ranks_held_out_steps(prm_dir, gold) -> None:
    out, result = prm_dir
    # 40 tasks, each a right and a wrong row of 2 steps; 30% of the tasks held out
    assert result.train_steps + result.holdout_steps == 160
    assert result.holdout_tasks > 0 and result.train_tasks + result.holdout_tasks == 40
    assert result.holdout_auc is not None and result.holdout_auc > 0.7, result
    info = json.loads((out / "prm.json").read_text())
    assert info["result"]["holdout_auc"] == result.holdout_auc
    scorer = StepScorer.load(out, "cpu")
    scores = scorer.score([gold[0], _corrupt(gold[0], 0)])
    assert [len(s) for s in scores] == [2, 2] and all(0 < p < 1 for s in scores for p in s)


def test_train_prm_cli(tmp_path: Path, gold, student) -> None:
    data = tmp_path / "rows"
    write_records(gold[:10] + [_corrupt(g, k) for k, g in enumerate(gold[:10])], data)
    res = CliRunner().invoke(
        app,
        ["train-prm", str(data), "--model", str(student), "--out", str(tmp_path / "p"),
         "--epochs", "5", "--json"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout.strip().splitlines()[-1])["train_steps"] > 0
    assert (tmp_path / "p" / "head.safetensors").is_file()


@pytest.mark.parametrize("advantage", ["turn_ppo", "archer", "prm", "implicit_prm"])
def test_every_estimator_runs_updates_end_to_end(
    advantage: str, tmp_path: Path, tasks, make_env, student, prm_dir
) -> None:
    from trajsynth.train.grpo import GRPOConfig, train_grpo

    cfg = GRPOConfig.model_validate(
        {
            "model": str(student),
            "advantage": advantage,
            "iterations": 2,
            "tasks_per_step": 2,
            "group_size": 2,
            "lr": 1e-3,
            "filter_variance": 1.0,
            "rollout": {"temperature": 1.0, "max_new_tokens": 12, "max_steps": 2},
            "reward": {"terms": {"tool_match": 0.5, "agent_reward": 0.5}, "format": 0.5},
            "prm": {"path": str(prm_dir[0])},
            "implicit_prm": {"lr": 1e-3},
            "archer": {"steps": 3},
            "max_observation_chars": 300,
            "device": "cpu",
        }
    )
    result = train_grpo(tasks[:4], tmp_path / "out", cfg, make_env=make_env)
    h = result.history
    assert len(h) == 2 and (tmp_path / "out" / "config.json").is_file()
    assert {"reward_tool_match", "reward_agent_reward", "reward_format", "starpo_kept"} <= set(h[0])
    want = {
        "turn_ppo": {"critic_loss", "explained_variance", "value_mean"},
        "archer": {"critic_loss", "critic_v_loss", "explained_variance", "replay"},
        "prm": {"prm_score_mean"},
        "implicit_prm": {"implicit_reward_std"},
    }[advantage]
    assert want <= set(h[-1]), h[-1]
    assert all(x["episodes_trained"] > 0 for x in h if advantage in ("turn_ppo", "archer"))


def _train_grpo(
    args: list[str], tasks_dir: Path, student: Path, tmp_path: Path, monkeypatch, capsys
) -> tuple[int, str]:
    """The real entry point with rollouts forbidden (a refused input must stop before the
    first one): (exit code, stderr)."""
    import trajsynth.train.grpo as grpo
    from trajsynth.cli import main

    def no_rollouts(*a, **k):
        raise AssertionError("a rollout started")

    monkeypatch.setattr(grpo, "run_rollouts", no_rollouts)
    base = ["train-grpo", "--model", str(student), "--tasks", str(tasks_dir), "--out",
            str(tmp_path / "o"), "--iterations", "1"]  # fmt: skip
    capsys.readouterr()
    try:
        main(base + args)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--advantage", "prm"], "advantage prm needs a trained step scorer: give --prm DIR"),
        (["--advantage", "prm", "--prm", "."], "is not a PRM folder"),
        (["--advantage", "critic"], "'critic' is not one of"),
        (["--reward", "exact_match=0.5,agent_reward=0.3"], "sum to 0.8, not the declared total"),
        (["--reward", "exact"], "unknown reward term 'exact'"),
        (["--reward", "judge", "--set", "reward.judge.dimensions={completion: 2}"], "sum to 2"),
        (["--filter-variance", "1.5"], "filter_variance"),
    ],
)
def test_bad_input_is_one_message_before_any_rollout(
    args, message, tmp_path: Path, tasks, student, monkeypatch, capsys
) -> None:
    tasks_dir = tmp_path / "tasks"
    write_records(tasks[:2], tasks_dir)
    code, err = _train_grpo(args, tasks_dir, student, tmp_path, monkeypatch, capsys)
    assert code == 2, err
    assert message in " ".join(err.split()), err
    assert "Traceback" not in err


def test_workflow_family_one_early_wrong_call_dooms_the_episode(make_env) -> None:
    """bench/credit.py's family: four five-step math workflows, every math tool offered. The
    gold episode scores 1; with its second call swapped for another tool, the calls after it
    read the wrong output and the episode scores 0 on every reward, though three of its five
    tools are still the gold's."""
    from trajsynth.core.schema import ToolCall
    from trajsynth.core.task import GroundTruth
    from trajsynth.train.eval import score_episode, step_outcomes
    from trajsynth.train.synth import workflow_tasks

    rows = workflow_tasks(40, seed=0)
    assert len({r.id for r in rows}) == 40 and len(rows[0].tools) == 10
    assert {r.extra["family"] for r in rows} == {f"workflow-{k}" for k in range(4)}
    for row in rows[:4]:
        gold = gold_trajectory(row, make_env)
        assert [m.role for m in gold.messages].count("assistant") == 6
        scores = score_episode(row, gold.messages, make_env)
        assert scores["exact_match"] == scores["tool_match"] == 1.0
        # the same episode played with a wrong second tool
        gt = GroundTruth.from_json(row.ground_truth)
        env = make_env(row)
        env.reset(gt)
        messages = [gold.messages[0]]
        for k, m in enumerate(m for m in gold.messages if m.role == "assistant"):
            if k == 1:
                m = m.model_copy(update={"tool_calls": [ToolCall(id="x", name="list_values",
                                                                 arguments="{}")]})  # fmt: skip
            messages.append(m)
            if m.tool_calls:
                obs, _, _ = env.step(m)
                messages += obs.to_messages()
        bad = score_episode(row, messages, make_env)
        assert bad["exact_match"] == bad["tool_match"] == bad["call_match"] == 0.0
        assert step_outcomes(row, messages)[:2] == [1.0, 0.0]
