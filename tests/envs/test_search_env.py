"""The search environment (BM25 over a local collection) and its QA task family: a collection
and questions built from tau-bench's retail database (read from ../shared/external), search
that finds each question's first document, single- and multi-hop tasks played by the
simulated teacher and verified by their answer, exact-match / F1 rewards, GRPO on them with
the tool's output masked from the loss, and a collection without documents refused.

Run: python -m pytest tests/envs/test_search_env.py -q
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trajsynth.core.errors import InputNotFoundError
from trajsynth.core.schema import ToolCall
from trajsynth.envs.factory import EnvFactory
from trajsynth.envs.search import load_documents, load_questions, tau_collection
from trajsynth.envs.verifiers import answer_exact_match, answer_f1
from trajsynth.pipeline import run_pipeline
from trajsynth.store import read_records

pytest.importorskip("bm25s")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def collection(external_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("search")
    assert tau_collection(external_dir / "tau-bench" / "retail" / "data", out, questions=24) == 24
    return out


def _sets(collection: Path, n: int = 8) -> list[str]:
    return [
        f"defaults.env.search.docs={collection / 'docs'}",
        f"stages.tasks.with.questions={collection / 'qa.jsonl'}",
        f"stages.tasks.with.n={n}",
    ]


def test_bm25_finds_each_questions_first_document(collection: Path) -> None:
    docs = load_documents(collection / "docs")
    questions = load_questions(collection / "qa.jsonl")
    assert len(docs) > 1000 and {q.hops for q in questions} == {1, 2}
    env = EnvFactory({"search": {"retail": str(collection / "docs")}}).make("retail")
    for q in questions:
        r = env.execute(
            ToolCall(id="c", name="search", arguments=json.dumps({"query": q.question}))
        )
        assert q.docs[0] in [h["doc_id"] for h in r.output["results"]], q.question
    two_hop = next(q for q in questions if q.hops == 2)
    opened = env.execute(
        ToolCall(id="o", name="open_document", arguments=json.dumps({"doc_id": two_hop.docs[1]}))
    )
    assert two_hop.answers[0] in opened.output["text"]
    assert (
        env.state_hash()
        == EnvFactory({"search": {"retail": str(collection / "docs")}}).make("retail").state_hash()
    )  # searching changes nothing


def test_answers_are_scored_by_exact_match_and_f1() -> None:
    assert answer_exact_match("The order is <answer>Pending</answer>.", ["pending"]) == 1.0
    assert answer_exact_match("pending, I think", ["pending"]) == 0.0
    assert answer_f1("pending, I think", ["pending"]) == pytest.approx(0.5)  # P 1/3, R 1
    assert answer_f1("no idea", ["Dallas"]) == 0.0


def test_the_search_pipeline_plays_single_and_multi_hop_tasks(
    collection: Path, tmp_path: Path
) -> None:
    result = run_pipeline("search", out=tmp_path / "run", overrides=_sets(collection))
    tasks = read_records(result.output("tasks"))
    assert len(tasks) == 8
    assert {"single_call", "multi_hop"} <= {c for t in tasks for c in t.capabilities}
    verified = read_records(result.output("verified"))
    assert verified and all(r.success for r in verified)
    for r in verified:
        answers = r.extra.get("answers") or r.ground_truth.extra["answers"]
        assert answer_exact_match(r.final_answer(), answers) == 1.0
        searches = [c for c in r.calls() if c.name == "search"]
        assert len(searches) >= (2 if "multi_hop" in r.capabilities else 1)
    # again: the same rows (a BM25 index is deterministic)
    again = run_pipeline("search", out=tmp_path / "again", overrides=_sets(collection))
    assert [r.id for r in read_records(again.output("verified"))] == [r.id for r in verified]


def test_a_collection_without_documents_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.csv").write_text("a,b\n")
    with pytest.raises(InputNotFoundError, match="no documents"):
        load_documents(empty)
    (tmp_path / "qa.jsonl").write_text('{"question": "q?", "answer": "a"}\n')
    res = subprocess.run(
        [sys.executable, "-m", "trajsynth", "run", "search", "-q", "--out", str(tmp_path / "r"),
         "--set", f"defaults.env.search.docs={empty}",
         "--set", f"stages.tasks.with.questions={tmp_path / 'qa.jsonl'}"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    assert str(empty) in res.stderr and "no documents" in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.slow
def test_grpo_on_qa_tasks_rewards_the_answer_and_masks_tool_output(
    collection: Path, tmp_path: Path
) -> None:
    """The GRPO example: a tiny student (SFT on the verified rollouts), then GRPO on the QA
    tasks with the answer's token F1 as reward, in the run's search environment; every
    token of a tool's output is context (mask 0), never a loss target."""
    pytest.importorskip("torch")

    from trajsynth.pipeline.spec import resolve_pipeline

    result = run_pipeline(
        resolve_pipeline({
            "name": "search-grpo",
            "defaults": {"seed": 0, "env": {"search": {"docs": str(collection / "docs")}}},
            "stages": [
                {"id": "tasks", "uses": "qa_tasks", "with": {"questions": str(
                    collection / "qa.jsonl"), "domain": "docs", "n": 6}},
                {"id": "rollouts", "uses": "rejection_sampling", "from": "tasks",
                 "with": {"n": 2}},
                {"id": "student", "uses": "train_sft", "from": "rollouts",
                 "with": {"sft": {"max_steps": 4, "batch_size": 2, "max_len": 512}}},
                {"id": "grpo", "uses": "train_grpo", "from": "tasks", "needs": ["student"],
                 "with": {"grpo": {"iterations": 1, "tasks_per_step": 2, "group_size": 2,
                                   "rollout": {"max_new_tokens": 16, "max_steps": 2},
                                   "reward": {"kind": "answer_f1"}}}},
            ],
        }),
        out=tmp_path / "run",
    )  # fmt: skip
    last = result.manifest.stages["grpo"].metrics["values"]["last"]
    assert last["groups"] == 2 and 0.0 <= last["reward"] <= 1.0


def test_answer_rewards_drive_the_group_advantages(collection: Path, tmp_path: Path) -> None:
    """GRPO's reward for a QA task is the answer's F1 (or exact match): in a group, the
    episode that answers right gets the positive advantage."""
    pytest.importorskip("torch")
    from trajsynth.core.schema import Message
    from trajsynth.train.advantages import AdvantageStats
    from trajsynth.train.grpo import GRPOConfig, score_and_advantages
    from trajsynth.train.rollout import Rollout

    result = run_pipeline("search", out=tmp_path / "run", overrides=_sets(collection, 2))
    task = read_records(result.output("tasks"))[0]
    answer = task.extra["answers"][0]
    episodes = [
        Rollout(row=task, messages=[Message(role="user", content=task.goal),
                                    Message(role="assistant", content=text)])
        for text in (f"<answer>{answer}</answer>", "<answer>no idea</answer>",
                     f"It is {answer}, I believe")
    ]  # fmt: skip
    factory = EnvFactory({"search": {"docs": str(collection / "docs")}})

    def make_env(row):
        return factory.make(row.domain)

    for kind, want in (("answer_f1", [1.0, 0.0, 0.33]), ("answer_em", [1.0, 0.0, 0.0])):
        cfg = GRPOConfig(model="unused", reward={"kind": kind})
        kept = score_and_advantages(episodes, make_env, cfg, AdvantageStats())
        assert [round(ep.reward, 2) for ep in episodes] == want, kind
        adv = {id(ep): a[0] for ep, a in kept}
        assert adv[id(episodes[0])] > 0 > adv[id(episodes[1])]
