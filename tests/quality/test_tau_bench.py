"""Real data: the 200 gpt-4o tau-bench airline trajectories of ``shared/external/tau-bench``
imported as trajsynth rows, then scored, filtered and deduplicated; every count is checked
against one this test derives on its own from the raw JSON (plain Python over the file, none
of the library's scoring, filtering or hashing code).

Run: python -m pytest tests/quality/test_tau_bench.py -q
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import jsonschema
import pyarrow as pa
import pytest

from trajsynth.core import to_batch
from trajsynth.stages import Context, ContextSpec, build_stage
from trajsynth.store.importers import tau_trajectories


@pytest.fixture(scope="module")
def raw(external_dir: Path) -> list[dict]:
    return json.loads(
        (external_dir / "tau-bench/historical_trajectories/gpt-4o-airline.json").read_text()
    )


@pytest.fixture(scope="module")
def tools(external_dir: Path) -> list[dict]:
    return json.loads((external_dir / "tau-bench/airline/tools_openai.json").read_text())


@pytest.fixture(scope="module")
def rows(external_dir: Path):
    return tau_trajectories(external_dir / "tau-bench/historical_trajectories/gpt-4o-airline.json")


@pytest.fixture(scope="module")
def scored(rows) -> pa.Table:
    return collect(build_stage("score", {}).process(iter([to_batch(rows)]), Context(ContextSpec())))


def collect(outputs) -> pa.Table:
    """The main-output rows a stage yielded, as one table."""
    return pa.concat_tables(
        pa.Table.from_batches([o]) if isinstance(o, pa.RecordBatch) else o for o in outputs
    )


def _calls(run: dict) -> list[dict]:
    return [c for m in run["traj"] if m["role"] == "assistant" for c in (m.get("tool_calls") or [])]


def _quality(run: dict) -> float:
    """The brief's formula, from the raw messages: 0.5·max(0, 1 − 0.1·calls) + 0.5·share of
    assistant messages that have thought, action and observation (a message with calls needs
    text next to them and a tool message for each call; a text message needs its text)."""
    answered = {m.get("tool_call_id") for m in run["traj"] if m["role"] == "tool"}
    steps = [m for m in run["traj"] if m["role"] == "assistant"]
    complete = 0
    for m in steps:
        calls = m.get("tool_calls") or []
        text = bool((m.get("content") or "").strip())
        if calls:
            complete += text and all(c["id"] in answered for c in calls)
        else:
            complete += text
    eff = max(0.0, 1 - 0.1 * len(_calls(run)))
    return round(0.5 * eff + 0.5 * (complete / len(steps) if steps else 0.0), 10)


def test_import_counts(raw: list[dict], rows) -> None:
    assert len(rows) == len(raw) == 200
    assert sum(r.success for r in rows) == sum(1 for r in raw if r["reward"] == 1) == 84
    assert len({r.task_id for r in rows}) == len({r["task_id"] for r in raw}) == 50
    assert sum(r.num_tool_calls for r in rows) == sum(len(_calls(r)) for r in raw) == 1164
    # pass counts per task, from the raw trials
    by_task: dict[int, list[float]] = {}
    for r in raw:
        by_task.setdefault(r["task_id"], []).append(r["reward"])
    for row, run in zip(rows, raw, strict=True):
        assert row.rollouts_total == len(by_task[run["task_id"]])
        assert row.rollouts_passed == sum(1 for x in by_task[run["task_id"]] if x == 1)
        gold = row.ground_truth.model_dump(mode="json")["turns"][0]["steps"]
        assert [s[0]["name"] for s in gold] == [a["name"] for a in run["info"]["task"]["actions"]]


def test_every_call_is_schema_valid(raw: list[dict], tools: list[dict]) -> None:
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    bad = 0
    for run in raw:
        for c in _calls(run):
            try:
                jsonschema.validate(
                    json.loads(c["function"]["arguments"]), schemas[c["function"]["name"]]
                )
            except (jsonschema.ValidationError, KeyError):
                bad += 1
    assert bad == 0  # so the format rule must drop nothing (checked below)


def test_scores_match_the_formula_on_raw_messages(raw: list[dict], scored: pa.Table) -> None:
    got = scored.column("quality_score").to_pylist()
    assert got == pytest.approx([_quality(r) for r in raw])
    comps = [dict(c) for c in scored.column("reward_components").to_pylist()]
    # R_task is tau-bench's own reward; the penalty is 0.1 · min(1, assistant turns / 20)
    for c, run in zip(comps, raw, strict=True):
        turns = sum(1 for m in run["traj"] if m["role"] == "assistant")
        assert c["penalized_reward"] == pytest.approx(run["reward"] - 0.1 * min(1, turns / 20))


def test_filter_counts(raw: list[dict], scored: pa.Table) -> None:
    expected = []
    for run in raw:
        ok = run["reward"] == 1
        turns = sum(1 for m in run["traj"] if m["role"] == "assistant")
        drop = (ok and turns < 2) or (ok and len(_calls(run)) > 8) or _quality(run) < 0.7
        drop = drop or not ok  # `unsuccessful`, on by default: tau-bench's reward is not 1
        expected.append(not drop)
    ctx = Context(ContextSpec())
    stage = build_stage("filter", {"incoherent": False})
    out = collect(stage.process(iter(scored.to_batches()), ctx))
    ids = scored.column("id").to_pylist()
    assert out.column("id").to_pylist() == [i for i, k in zip(ids, expected, strict=True) if k]
    counters = ctx.metrics.snapshot()["counters"]
    assert counters["dropped.invalid_calls"] == 0
    assert counters["failing.inefficient"] == sum(
        1 for r in raw if r["reward"] == 1 and len(_calls(r)) > 8
    )
    # with the coherence rule on, exactly the rows whose coherence is below 0.5 go as well
    full = collect(build_stage("filter", {}).process(iter(scored.to_batches()), ctx))
    coherence = [dict(c)["coherence"] for c in scored.column("reward_components").to_pylist()]
    assert full.column("id").to_pylist() == [
        i for i, k, c in zip(ids, expected, coherence, strict=True) if k and c >= 0.5
    ]


def _words(text: str) -> list[str]:
    return [w for w in re.split(r"[^0-9a-z]+", text.lower()) if w]


def _shingles(run: dict) -> set[tuple]:
    words = _words(run["info"]["task"]["instruction"])
    grams = (
        {tuple(words[i : i + 3]) for i in range(len(words) - 2)}
        if len(words) >= 3
        else {tuple(words)}
    )
    names = []
    for m in run["traj"]:
        if m["role"] == "assistant":
            names += sorted(c["function"]["name"] for c in m.get("tool_calls") or [])
    seq = ["^", *names, "$"]
    return {("g", *g) for g in grams} | {("a", a, b) for a, b in itertools.pairwise(seq)}


def test_dedup_counts(raw: list[dict], rows, scored: pa.Table) -> None:
    ids = [r.id for r in rows]
    quality = [_quality(r) for r in raw]
    order = sorted(range(len(raw)), key=lambda i: (-quality[i], ids[i]))  # survivor priority
    # exact: equal normalised instruction and equal skeleton
    key = [
        (
            " ".join(_words(r["info"]["task"]["instruction"])),
            tuple(
                n
                for m in r["traj"]
                if m["role"] == "assistant"
                for n in sorted(c["function"]["name"] for c in m.get("tool_calls") or [])
            ),
        )
        for r in raw
    ]
    seen: set = set()
    exact_kept = []
    for i in order:
        if key[i] not in seen:
            seen.add(key[i])
            exact_kept.append(i)
    # near: Jaccard ≥ 0.85 of goal trigrams + action bigrams, greedy in priority order
    sh = {i: _shingles(raw[i]) for i in exact_kept}
    kept: list[int] = []
    for i in exact_kept:
        if all(len(sh[i] & sh[j]) / len(sh[i] | sh[j]) < 0.85 for j in kept):
            kept.append(i)
    ctx = Context(ContextSpec())
    out = collect(build_stage("dedup", {}).process(iter(scored.to_batches()), ctx))
    counters = ctx.metrics.snapshot()["counters"]
    assert counters["exact_duplicates"] == len(raw) - len(exact_kept) > 0
    assert counters["near_duplicates"] == len(exact_kept) - len(kept) > 0
    assert set(out.column("id").to_pylist()) == {ids[i] for i in kept}
