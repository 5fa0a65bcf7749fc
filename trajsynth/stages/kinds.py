"""The stage protocol: the kinds of stage every method subclasses, and what they may yield.

A stage is a class with a pydantic config, registered by name (the ``uses:`` of a pipeline
step), whose ``process`` turns record batches into record batches. It never opens files and
never knows which executor runs it: the runner reads its inputs, writes what it yields,
caches, resumes and parallelises. That keeps every method runnable alone
(``trajsynth stage NAME``), in a pipeline, and on a cluster, without change.

Three kinds, which the runner treats differently:

- :class:`SourceStage` makes rows from its config. ``generate(ctx, offset)`` must yield the
  same rows in the same order for the same config and seed, and skip the first ``offset``
  rows: that is how a killed run resumes without losing or duplicating rows.
- :class:`MapStage` maps batches to batches with rows independent; the runner calls
  ``process`` once per input shard (a *unit*) and may run units in parallel processes.
  :class:`RowStage` is a MapStage written row by row, synchronously or with ``async``.
- :class:`GlobalStage` needs every row at once (dedup, balance, concat); ``process`` gets one
  iterator over all input batches.
- :class:`StreamingGlobalStage` is a global stage that runs in bounded memory:
  ``process_shards`` gets a :class:`ShardSet` (the input shards, in order, readable column by
  column) and makes as many passes over it as it needs, running per-shard work through
  ``shards.map`` (the executor's process pool or Ray tasks) and keeping only small
  fixed-width columns (hashes, ranks) of every row in the driver; its survivors are yielded
  shard by shard and written by the runner, like any stage's output.

Each kind is generic in its config: ``class Echo(GlobalStage[EchoConfig])`` makes
``EchoConfig`` the class that validates the step's ``with:`` and types ``self.config``. An
inner ``class Config(StageConfig)`` does the same for stages that prefer it.

What ``process`` may yield: a ``pa.RecordBatch`` or ``pa.Table`` under the trajectory schema,
a list of :class:`~trajsynth.core.Trajectory`, or ``Emit(output_name, data)`` for a named side
output (``outputs = ("main", "failed")``). Stages build new rows; they never edit the rows
they were given.

Example::

    class MaxCallsConfig(StageConfig):
        max_calls: int = Field(8, description="Largest number of calls kept.")

    @register
    class MaxCalls(RowStage[MaxCallsConfig]):
        \"\"\"Keep trajectories with at most ``max_calls`` calls.\"\"\"
        name = "max_calls"
        reads = ("messages",)

        def process_row(self, row, ctx):
            if row.num_tool_calls <= self.config.max_calls:
                yield row
"""

from __future__ import annotations

import enum
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeAlias, TypeVar, cast, get_args

import pyarrow as pa

from ..core.batch import batches_by_output, to_batch, to_records
from ..core.config import StrictModel
from ..core.errors import InfraError
from ..core.schema import Trajectory
from .context import Context

__all__ = [
    "BASE_COLUMNS",
    "Emit",
    "GlobalStage",
    "MapStage",
    "Output",
    "RowStage",
    "RowsGlobalStage",
    "ShardRef",
    "ShardSet",
    "SourceStage",
    "Stage",
    "StageConfig",
    "StageKind",
    "StreamingGlobalStage",
    "read_shard",
    "shard_columns",
]

T = TypeVar("T")

#: Columns every row has from the moment it is made (identity, task, tools, conversation,
#: provenance, derived counts). Other columns must be written by an upstream stage before a
#: stage may declare that it reads them; the pipeline validator checks this.
BASE_COLUMNS = frozenset(
    {
        "id",
        "schema_version",
        "task_id",
        "goal",
        "domain",
        "capabilities",
        "ground_truth",
        "tools",
        "messages",
        "num_turns",
        "num_tool_calls",
        "method",
        "stage_id",
        "parent_ids",
        "generator",
        "run_id",
        "config_hash",
        "iteration",
        "seed",
        "created_at",
        "extra",
    }
)


class StageKind(enum.StrEnum):
    SOURCE = "source"
    MAP = "map"
    GLOBAL = "global"


class StageConfig(StrictModel):
    """Base of every stage's config: unknown keys are errors, so YAML typos fail early."""


@dataclass
class Emit:
    """Route ``data`` to the named output ``name`` instead of the main one."""

    name: str
    data: pa.RecordBatch | pa.Table | Sequence[Trajectory]


C = TypeVar("C", bound=StageConfig)
Output: TypeAlias = pa.RecordBatch | pa.Table | Sequence[Trajectory] | Emit


class Stage(ABC, Generic[C]):
    """Base of every stage. Subclass :class:`SourceStage`, :class:`MapStage`,
    :class:`RowStage` or :class:`GlobalStage`, not this."""

    #: registry name, the ``uses:`` of a pipeline step
    name: ClassVar[str] = ""
    kind: ClassVar[StageKind] = StageKind.MAP
    Config: ClassVar[type[StageConfig]] = StageConfig
    #: columns the stage reads beyond BASE_COLUMNS (checked against upstream ``writes``)
    reads: ClassVar[tuple[str, ...]] = ()
    #: columns the stage fills in the rows it yields
    writes: ClassVar[tuple[str, ...]] = ()
    #: named outputs; the first is the main one (the stage's folder), the others side outputs
    outputs: ClassVar[tuple[str, ...]] = ("main",)
    #: True when the stage mostly waits on I/O (LLM calls): units then run concurrently in
    #: threads of one process sharing one event loop, instead of in a process pool
    io_bound: ClassVar[bool] = False
    #: True when the stage writes files into ``ctx.artifacts_dir`` (e.g. a trained model)
    #: that later stages use through ``needs:``
    makes_artifact: ClassVar[bool] = False
    #: how many ``from:`` inputs the stage accepts (min, max); None = unbounded
    inputs_range: ClassVar[tuple[int, int | None]] = (1, 1)

    config: C

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """``class X(GlobalStage[XConfig])`` sets ``X.Config = XConfig`` (unless X defines
        ``Config`` itself)."""
        super().__init_subclass__(**kwargs)
        if "Config" in cls.__dict__:
            return
        for base in cls.__dict__.get("__orig_bases__", ()):
            for arg in get_args(base):
                if isinstance(arg, type) and issubclass(arg, StageConfig):
                    cls.Config = arg
                    return

    def __init__(self, config: C | None = None) -> None:
        self.config = config if config is not None else cast(C, self.Config())

    def setup(self, ctx: Context) -> None:
        """Acquire clients or models before the first batch (called once per process)."""

    def teardown(self) -> None:
        """Release what :meth:`setup` acquired."""

    @abstractmethod
    def process(self, batches: Iterator[pa.RecordBatch], ctx: Context) -> Iterator[Output]:
        """Yield the rows made from ``batches`` (each kind says what they are)."""

    def expected_rows(self) -> int | None:
        """Rows a source will make, when known (for the progress bar)."""
        return None

    def findings(self, metrics: dict[str, Any]) -> list[str]:
        """What the finished stage's metrics (merged over every unit and process: ``counters``,
        ``values``, ``lists``) show that its user must see although nothing failed, one line
        each: a domain none of whose tasks was solved, rows a trainer could not use. The runner
        logs them, keeps them in the manifest (``StageState.findings``) and ``trajsynth run``
        prints them under the stage's line. Default: none."""
        return []

    @classmethod
    def doc(cls) -> str:
        """First line of the class docstring."""
        return (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""

    @classmethod
    def config_fields(cls) -> dict[str, str]:
        """field name → 'type = default: description', for ``trajsynth stages``."""
        out = {}
        for fname, info in cls.Config.model_fields.items():
            ann = getattr(info.annotation, "__name__", None) or str(info.annotation)
            ann = ann.replace("typing.", "")
            default = (
                "required"
                if info.is_required()
                else repr(info.get_default(call_default_factory=True))
            )
            out[fname] = f"{ann} = {default}: {info.description or ''}".rstrip(": ")
        return out


class SourceStage(Stage[C]):
    """Makes rows from its config; resumable from an offset."""

    kind = StageKind.SOURCE
    inputs_range = (0, 0)

    @abstractmethod
    def generate(self, ctx: Context, offset: int = 0) -> Iterator[Output]:
        """Yield rows ``offset, offset+1, ...`` in a deterministic order."""

    def process(self, batches: Iterator[pa.RecordBatch], ctx: Context) -> Iterator[Output]:
        return self.generate(ctx, 0)


class MapStage(Stage[C]):
    """Batch in, batches out; rows independent. Called once per input shard."""

    kind = StageKind.MAP
    inputs_range = (1, None)

    @abstractmethod
    def process(self, batches: Iterator[pa.RecordBatch], ctx: Context) -> Iterator[Output]:
        """Yield the rows made from ``batches``."""


class RowStage(MapStage[C]):
    """A map stage written one row at a time.

    Implement either ``process_row(row, ctx) -> Iterable[Trajectory]`` (sync) or
    ``async aprocess_row(row, ctx) -> list[Trajectory]`` (async; rows of a batch then run
    concurrently, at most ``concurrency`` at once, on the shared event loop). Rows are read in
    batches of ``batch_rows`` so that async stages have enough rows in flight.

    A row whose processing raises :class:`~trajsynth.core.errors.InfraError` (an LLM endpoint
    failed for good) yields nothing and is counted (``ctx.lost_to_infra``): the endpoint's
    failure never becomes a row.
    """

    concurrency: ClassVar[int] = 256
    batch_rows: ClassVar[int] = 1024

    def process_row(self, row: Trajectory, ctx: Context) -> Iterable[Trajectory | Emit]:
        raise NotImplementedError(
            f"{type(self).__name__} implements neither process_row nor aprocess_row"
        )

    async def aprocess_row(self, row: Trajectory, ctx: Context) -> list[Trajectory | Emit]:
        return list(self.process_row(row, ctx))

    def _is_async(self) -> bool:
        return type(self).aprocess_row is not RowStage.aprocess_row

    def priority(self, row: Trajectory) -> float:
        """Async stages start the rows of a batch highest priority first (e.g. the longest
        expected work, so that the batch does not end waiting on a few long rows); the output
        keeps the input order. Default: input order."""
        return 0.0

    async def _row_or_lost(self, row: Trajectory, ctx: Context) -> list[Trajectory | Emit]:
        try:
            return await self.aprocess_row(row, ctx)
        except InfraError as exc:
            ctx.lost_to_infra(exc)
            return []

    def _sync_row_or_lost(self, row: Trajectory, ctx: Context) -> list[Trajectory | Emit]:
        try:
            return list(self.process_row(row, ctx))
        except InfraError as exc:
            ctx.lost_to_infra(exc)
            return []

    def process(self, batches: Iterator[pa.RecordBatch], ctx: Context) -> Iterator[Output]:
        for batch in _rebatch(batches, self.batch_rows):
            rows = to_records(batch)
            if self._is_async():
                order = sorted(range(len(rows)), key=lambda i: -self.priority(rows[i]))
                done = ctx.gather(
                    (self._row_or_lost(rows[i], ctx) for i in order), limit=self.concurrency
                )
                results: list[Any] = [None] * len(rows)
                for i, res in zip(order, done, strict=True):
                    results[i] = res
            else:
                results = [self._sync_row_or_lost(r, ctx) for r in rows]
            yield from _split_emits([x for res in results for x in res])
            ctx.advance(len(rows))


class GlobalStage(Stage[C]):
    """Needs every row at once; ``process`` receives one iterator over all inputs' batches."""

    kind = StageKind.GLOBAL
    inputs_range = (1, None)

    @abstractmethod
    def process(self, batches: Iterator[pa.RecordBatch], ctx: Context) -> Iterator[Output]:
        """Yield the output rows, having seen (or streamed through) every input row."""


class RowsGlobalStage(GlobalStage[C]):
    """A global stage written as one coroutine over every input row: ``aprocess_rows`` gets
    the rows sorted by id (so the output does not depend on how the inputs were sharded) and
    runs on the shared event loop; the rows it returns are the main output."""

    io_bound = True

    def process(self, batches: Iterator[pa.RecordBatch], ctx: Context) -> Iterator[Output]:
        rows = sorted((r for b in batches for r in to_records(b)), key=lambda r: r.id)
        out = ctx.run(self.aprocess_rows(rows, ctx))
        if out:
            yield to_batch(out)

    @abstractmethod
    async def aprocess_rows(self, rows: list[Trajectory], ctx: Context) -> list[Trajectory]:
        """The output rows made from every input row."""


#: one input shard of a streaming global stage: a reader the runner gives (``reader(columns)``
#: → the shard's rows, a picklable callable, since workers read their shards themselves: the
#: store layer owns the files), or (for a stage run on batches in memory) the rows themselves
ShardRef: TypeAlias = Callable[[Sequence[str] | None], pa.Table] | pa.Table

#: ``mapper(fn, args, rows)``: ``[fn(*a) for a in args]``, run wherever the executor runs work
Mapper = Callable[[Callable[..., Any], Sequence[tuple[Any, ...]], int], list[Any]]


def read_shard(ref: ShardRef, columns: Sequence[str] | None = None) -> pa.Table:
    """The rows of one shard (only ``columns`` when given)."""
    if isinstance(ref, pa.Table):
        return ref.select(list(columns)) if columns is not None else ref
    return ref(list(columns) if columns is not None else None)


def shard_columns(ref: ShardRef) -> list[str]:
    """Column names of one shard (a zero-column read of a file gives its schema)."""
    if isinstance(ref, pa.Table):
        return list(ref.schema.names)
    names = getattr(ref, "columns", None)  # a reader that knows its schema (store.ShardReader)
    return list(names) if names is not None else list(ref(None).schema.names)


@dataclass
class ShardSet:
    """The input of a :class:`StreamingGlobalStage`: every input shard, in input order.

    Row ``r`` of the stage's input is row ``r - offsets[i]`` of shard ``i``. ``map`` runs a
    top-level function once per argument tuple through the executor (inline, a process pool
    or Ray tasks) and returns the results in order; ``spill_dir`` is a folder on storage that
    every worker sees, emptied by the runner when the stage ends.
    """

    shards: list[ShardRef]
    rows: list[int]
    spill_dir: Path
    mapper: Mapper | None = None
    #: the input (as its stage's ``from:`` names it) each shard comes from ([]: not known)
    inputs: list[str] = field(default_factory=list)
    offsets: list[int] = field(init=False)

    def __post_init__(self) -> None:
        self.offsets = [0]
        for n in self.rows:
            self.offsets.append(self.offsets[-1] + n)

    def __len__(self) -> int:
        return len(self.shards)

    @property
    def total_rows(self) -> int:
        return self.offsets[-1]

    def read(self, i: int, columns: Sequence[str] | None = None) -> pa.Table:
        return read_shard(self.shards[i], columns)

    def map(self, fn: Callable[..., T], args: Sequence[tuple[Any, ...]]) -> list[T]:
        """``[fn(*a) for a in args]``, run by the executor (``fn`` must be importable)."""
        if self.mapper is None or len(args) <= 1:
            return [fn(*a) for a in args]
        return self.mapper(fn, args, self.total_rows)

    @classmethod
    def of_batches(cls, batches: Iterable[pa.RecordBatch], spill_dir: Path) -> ShardSet:
        """Batches held in memory as shards (a streaming stage called through ``process``)."""
        tables = [pa.Table.from_batches([b]) for b in batches if b.num_rows]
        return cls(shards=list(tables), rows=[t.num_rows for t in tables], spill_dir=spill_dir)


class StreamingGlobalStage(GlobalStage[C]):
    """A global stage that streams: passes over the input shards, per-shard work through
    ``shards.map``, only fixed-width columns of every row held at once (see the module
    docstring). ``process`` (batches in memory) runs the same code on the batches as
    shards, so the output is the same either way."""

    def process(self, batches: Iterator[pa.RecordBatch], ctx: Context) -> Iterator[Output]:
        with tempfile.TemporaryDirectory(prefix="trajsynth-spill-") as tmp:
            yield from self.process_shards(ShardSet.of_batches(batches, Path(tmp)), ctx)

    @abstractmethod
    def process_shards(self, shards: ShardSet, ctx: Context) -> Iterator[Output]:
        """Yield the output rows, reading ``shards`` as many times as needed."""


def _rebatch(batches: Iterator[pa.RecordBatch], rows: int) -> Iterator[pa.RecordBatch]:
    pending: list[pa.RecordBatch] = []
    n = 0
    for b in batches:
        pending.append(b)
        n += b.num_rows
        while n >= rows:
            table = pa.Table.from_batches(pending)
            head, rest = table.slice(0, rows), table.slice(rows)
            yield head.combine_chunks().to_batches()[0] if head.num_rows else head
            pending = rest.to_batches() if rest.num_rows else []
            n = rest.num_rows
    if n:
        table = pa.Table.from_batches(pending).combine_chunks()
        yield from table.to_batches()


def _split_emits(items: list[Trajectory | Emit]) -> Iterator[Output]:
    routed = (
        (x.name, x.data) if isinstance(x, Emit) else (None, x)
        for x in items
        if isinstance(x, (Emit, Trajectory))
    )
    for name, batch in batches_by_output(routed):
        yield batch if name is None else Emit(name, batch)
