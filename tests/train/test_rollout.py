"""A local checkpoint played by the one episode runner, token in / token out: per step the
prompt ids, the generated ids and their log-probabilities; the ids the model wrote are never
re-tokenized; the log-probabilities are the model's own; the gold user plays as in
generation; ``trajsynth eval --model`` goes the same way.

Run: PYTHONPATH=. python -m pytest tests/train/test_rollout.py -q
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from trajsynth.core.schema import Message  # noqa: E402
from trajsynth.core.task import GroundTruth  # noqa: E402
from trajsynth.envs.episode import NUDGE, EpisodeLimits, run_episode  # noqa: E402
from trajsynth.llm import RoleConfig  # noqa: E402
from trajsynth.llm.local import LocalBackend  # noqa: E402
from trajsynth.train.rollout import ChatPlayer, RolloutConfig, run_rollouts  # noqa: E402
from trajsynth.train.synth import env_maker, task_variants  # noqa: E402
from trajsynth.train.template import hf_messages  # noqa: E402


@pytest.fixture(scope="module")
def backend(tiny_dir: Path) -> LocalBackend:
    """The tiny checkpoint through ``backend: local``; every even token id ends a turn, so
    the random model writes short messages that close (about two tokens each)."""
    config = RoleConfig(backend="local", model=str(tiny_dir), local={"batch_size": 8})
    backend = LocalBackend(config)
    tok, model = backend.load()
    model.generation_config.eos_token_id = list(range(0, len(tok), 2))
    return backend


@pytest.fixture(scope="module")
def row():
    """A three-turn task: the random model's text answers move the gold user to the next
    turn, so an episode has several steps and user messages between them."""
    row = task_variants(1, seed=0, task_ids=["travel-convert"])[0]
    gt = GroundTruth.from_json(row.ground_truth)
    assert gt is not None
    turns = [gt.turns[0]] + [
        gt.turns[0].model_copy(update={"request": f"Once more, number {k}."}) for k in (1, 2)
    ]
    return row.derive(ground_truth=gt.model_copy(update={"turns": turns}).model_dump(mode="json"))


def test_checkpoint_episode_records_prompt_ids_generated_ids_and_logprobs(backend, row) -> None:
    tok, model = backend.load()
    player = ChatPlayer.local(backend, logprobs=True)
    cfg = RolloutConfig(temperature=1.0, max_new_tokens=16, max_steps=6)
    gt = GroundTruth.from_json(row.ground_truth)
    env = env_maker(300)(row)
    result = asyncio.run(
        run_episode(
            gt, env, player.policy(row, 11, cfg), tools=row.tools, renderer=player.renderer,
            limits=EpisodeLimits(max_steps=6, max_tokens=2048),
        )
    )  # fmt: skip
    steps = result.token_steps
    assert result.end == "done" and result.steps == len(steps) >= 3
    # the first prompt is the chat template's rendering of the first request
    first = tok.apply_chat_template(
        hf_messages(result.messages[:1]), tools=row.tools, add_generation_prompt=True,
        tokenize=True, return_dict=False,
    )  # fmt: skip
    assert steps[0].prompt_ids == list(first)
    stops = set(model.generation_config.eos_token_id)
    for k, ts in enumerate(steps):
        assert ts.token_ids and ts.token_ids[-1] in stops  # closed: ends on its stop token
        assert ts.logprobs is not None and len(ts.logprobs) == len(ts.token_ids)
        if k:  # what came before is kept id for id, the user's reply appended after it
            before = steps[k - 1].prompt_ids + steps[k - 1].token_ids
            assert ts.prompt_ids[: len(before)] == before
            reply = tok.decode(ts.prompt_ids[len(before) :])
            assert f"Once more, number {k}." in reply or NUDGE in reply
            assert reply.endswith("<|im_start|>assistant\n")
    # the whole sequence, its loss mask and the step of every generated token
    assert result.token_ids == steps[-1].prompt_ids + steps[-1].token_ids
    generated = [t for ts in steps for t in ts.token_ids]
    assert [t for t, m in zip(result.token_ids, result.mask, strict=True) if m] == generated
    assert [s for s in result.step_of_token if s >= 0] == [
        k for k, ts in enumerate(steps) for _ in ts.token_ids
    ]
    # the recorded log-probabilities are the model's, teacher-forced on the same ids
    ids = torch.tensor([result.token_ids])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)
    positions = [i for i, m in enumerate(result.mask) if m]
    forced = [float(logp[i - 1, result.token_ids[i]]) for i in positions]
    recorded = [lp for ts in steps for lp in ts.logprobs or []]
    assert recorded == pytest.approx(forced, abs=1e-4)


def test_rollouts_of_a_checkpoint_cap_the_sequence_and_keep_logprobs(backend, row) -> None:
    player = ChatPlayer.local(backend, logprobs=True)
    assert player.renderer is not None
    first = player.renderer.prompt_ids([Message(role="user", content=row.goal)], row.tools)
    cap = len(first) + 40  # room for the first answers, not for the whole episode
    before = backend.stats["batches"]
    cfg = RolloutConfig(temperature=1.0, max_new_tokens=16, max_steps=6, max_len=cap)
    eps = run_rollouts([row, row], player, env_maker(300), cfg, samples=4, seed=0)
    assert len(eps) == 8 and all(ep.error is None for ep in eps)
    # concurrent episodes share generation batches
    assert backend.stats["batches"] - before < sum(ep.steps for ep in eps)
    assert any(ep.end == "length" for ep in eps)
    for ep in eps:
        assert len(ep.token_ids) <= cap and ep.truncated == (ep.end == "length")
        assert ep.token_ids[: len(first)] == first
        assert len(ep.logprobs) == sum(ep.mask) > 0
        assert len(ep.step_states) == ep.steps >= 1


def test_eval_cli_plays_a_checkpoint(tiny_dir: Path, tmp_path: Path, capsys) -> None:
    from .test_sft import _cli, _write

    _write(task_variants(2, seed=0, task_ids=["travel-convert"]), tmp_path / "tasks")
    code, out, err = _cli(
        capsys, "eval", "--tasks", str(tmp_path / "tasks"), "--model", str(tiny_dir),
        "--max-steps", "2", "--max-new-tokens", "8", "--device", "cpu", "--json",
    )  # fmt: skip
    assert code == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    assert report["tasks"] == 2 and report["overall"]["perplexity"] > 1.0


def test_token_in_needs_a_local_backend() -> None:
    from trajsynth.core.errors import ConfigError
    from trajsynth.llm import client_for_role

    client = client_for_role("teacher", {"teacher": {"backend": "sim"}})
    with pytest.raises(ConfigError, match="local checkpoint"):
        ChatPlayer(client, tokens=True)
    with pytest.raises(ConfigError, match="needs backend: local"):
        asyncio.run(client.chat([{"role": "user", "content": "hi"}], prompt_token_ids=[1, 2]))


def test_an_endpoint_that_fails_for_good_stops_the_probe_instead_of_failing_the_task() -> None:
    """A request whose retries ran out is the endpoint's failure, not the student's: the
    probe (eval, GCP) raises InfraError instead of recording a failed episode; a request the
    endpoint refused (a 4xx) is still the episode's error."""
    from trajsynth.core.errors import InfraError
    from trajsynth.llm.base import ChatResult

    class Failing:
        def __init__(self, error_type: str) -> None:
            self.error_type = error_type

        async def chat(self, *args, **kwargs) -> ChatResult:
            return ChatResult(error="HTTP 503 after 3 tries", error_type=self.error_type)

    rows = task_variants(2, seed=0)
    cfg = RolloutConfig(temperature=0.0, max_steps=2)
    with pytest.raises(InfraError, match="503"):
        run_rollouts(rows, ChatPlayer(Failing("infra")), env_maker(200), cfg)
    refused = run_rollouts(rows, ChatPlayer(Failing("endpoint")), env_maker(200), cfg)
    assert [r.error for r in refused] == ["RuntimeError: HTTP 503 after 3 tries"] * 2
