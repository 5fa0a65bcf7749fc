"""sample / concat / split, driven directly on in-memory batches.

Run: python -m pytest tests/stages/test_utility.py -q
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from trajsynth.core import to_batch
from trajsynth.stages import Context, ContextSpec, Emit, build_stage
from trajsynth.stages.plumbing.synthetic import synthetic_row

ROWS = [synthetic_row(i, seed=2, duplicate_rate=0.2) for i in range(400)]


def ctx(seed: int = 0, stage_id: str = "s") -> Context:
    return Context(ContextSpec(seed=seed, stage_id=stage_id))


def batches(size: int) -> list[pa.RecordBatch]:
    return [to_batch(ROWS[i : i + size]) for i in range(0, len(ROWS), size)]


def ids(outputs) -> list[str]:
    return [i for o in outputs if not isinstance(o, Emit) for i in o.column("id").to_pylist()]


def test_sample_n_is_seeded_and_independent_of_sharding() -> None:
    stage = build_stage("sample", {"n": 37})
    a = ids(stage.process(iter(batches(400)), ctx()))
    b = ids(stage.process(iter(batches(7)), ctx()))
    assert len(a) == 37 and a == b
    assert ids(stage.process(iter(batches(400)), ctx(seed=1))) != a
    order = [r.id for r in ROWS]
    assert a == sorted(a, key=order.index)  # input order is kept


def test_sample_fraction_and_n_larger_than_input() -> None:
    kept = ids(build_stage("sample", {"fraction": 0.25}).process(iter(batches(50)), ctx()))
    assert 60 <= len(kept) <= 140
    assert len(ids(build_stage("sample", {"n": 1000}).process(iter(batches(50)), ctx()))) == 400
    assert ids(build_stage("sample", {"n": 0}).process(iter(batches(50)), ctx())) == []


def test_sample_by_task_keeps_whole_tasks() -> None:
    out = list(build_stage("sample", {"n": 10, "by": "task"}).process(iter(batches(33)), ctx()))
    table = pa.concat_tables(
        pa.Table.from_batches([o]) if isinstance(o, pa.RecordBatch) else o for o in out
    )
    chosen = set(table.column("task_id").to_pylist())
    assert len(chosen) == 10
    assert table.num_rows == sum(1 for r in ROWS if r.task_id in chosen)


def test_split_never_puts_a_task_in_both() -> None:
    out = list(build_stage("split", {"eval_fraction": 0.3}).process(iter(batches(40)), ctx()))
    train = {t for o in out if not isinstance(o, Emit) for t in o.column("task_id").to_pylist()}
    evals = {t for o in out if isinstance(o, Emit) for t in o.data.column("task_id").to_pylist()}
    assert train and evals and not train & evals
    assert len(train) + len(evals) == len({r.task_id for r in ROWS})
    assert 0.15 < len(evals) / (len(train) + len(evals)) < 0.45


def test_concat_is_a_union_by_id() -> None:
    c = ctx()
    stage = build_stage("concat")
    out = ids(stage.process(iter(batches(50) + batches(30)), c))
    assert out == [r.id for r in ROWS]
    assert c.metrics.counters["repeated_ids_dropped"] == 400
    keep_all = build_stage("concat", {"drop_repeated_ids": False})
    assert len(ids(keep_all.process(iter(batches(50) + batches(30)), ctx()))) == 800


def test_unknown_config_is_a_clear_error() -> None:
    from trajsynth.core import ConfigError

    with pytest.raises(ConfigError, match=r"with\.fractoin: unknown field"):
        build_stage("sample", {"fractoin": 0.1})
