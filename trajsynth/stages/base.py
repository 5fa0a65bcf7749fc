"""The stage protocol: what every method implements, and the context it runs in.

A stage is a class with a pydantic ``Config``, registered by name (the ``uses:`` of a pipeline
step), whose ``process`` turns record batches into record batches. It never opens files and
never knows which executor runs it: the runner reads its inputs, writes what it yields,
caches, resumes and parallelises. That keeps every method runnable alone
(``trajsynth stage NAME``), in a pipeline, and on a cluster, without change.

Three kinds, which the runner treats differently (DESIGN.md, "Layers"):

- :class:`SourceStage` makes rows from its config. ``generate(ctx, offset)`` must yield the
  same rows in the same order for the same config and seed, and skip the first ``offset``
  rows: that is how a killed run resumes without losing or duplicating rows.
- :class:`MapStage` maps batches to batches with rows independent; the runner calls
  ``process`` once per input shard (a *unit*) and may run units in parallel processes.
  :class:`RowStage` is a MapStage written row by row, synchronously or with ``async``.
- :class:`GlobalStage` needs every row at once (dedup, balance, concat); ``process`` gets one
  iterator over all input batches.

What ``process`` may yield: a ``pa.RecordBatch`` or ``pa.Table`` under the trajectory schema,
a list of :class:`~trajsynth.core.Trajectory`, or ``Emit(output_name, data)`` for a named side
output (``outputs = ("main", "failed")``). Stages build new rows; they never edit the rows
they were given.

Example::

    class CountCalls(RowStage):
        \"\"\"Keep trajectories with at most ``max_calls`` calls.\"\"\"
        name = "max_calls"
        class Config(StageConfig):
            max_calls: int = Field(8, description="Largest number of calls kept.")
        reads = ("messages",)

        def process_row(self, row, ctx):
            if row.num_tool_calls <= self.config.max_calls:
                yield row
"""

from __future__ import annotations

import asyncio
import difflib
import enum
import importlib
import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..core.batch import to_batch, to_records
from ..core.config import StrictModel
from ..core.errors import ConfigError, UnknownStageError
from ..core.ids import seed_from, stable_hash
from ..core.schema import Trajectory

__all__ = [
    "BASE_COLUMNS",
    "STAGES",
    "Context",
    "ContextSpec",
    "Emit",
    "GlobalStage",
    "MapStage",
    "Metrics",
    "RowStage",
    "SourceStage",
    "Stage",
    "StageConfig",
    "StageKind",
    "build_stage",
    "get_stage",
    "load_builtin_stages",
    "register",
    "stage",
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


# --------------------------------------------------------------------------------------
# context
# --------------------------------------------------------------------------------------


class ContextSpec(BaseModel):
    """Everything needed to rebuild a stage's :class:`Context` in another process or machine."""

    model_config = ConfigDict(extra="forbid")

    stage_id: str = "stage"
    run_id: str = ""
    seed: int = 0
    config_hash: str = ""
    iteration: int = 0
    llm: dict[str, dict[str, Any]] = Field(default_factory=dict)
    env: dict[str, Any] = Field(default_factory=dict)
    cache_dir: str | None = None
    artifacts_dir: str | None = None
    #: artifact folders of the stages this one `needs:` (stage id → folder), in order
    artifacts_in: dict[str, str] = Field(default_factory=dict)


class Metrics:
    """Thread-safe counters and values a stage reports; merged into the run manifest.

    ``inc`` adds (summed across units), ``set`` records a value (last one wins),
    ``extend`` appends to a list (concatenated across units).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counters: dict[str, float] = {}
        self.values: dict[str, Any] = {}
        self.lists: dict[str, list[Any]] = {}

    def inc(self, name: str, n: float = 1) -> None:
        with self._lock:
            self.counters[name] = self.counters.get(name, 0) + n

    def set(self, name: str, value: Any) -> None:
        with self._lock:
            self.values[name] = value

    def extend(self, name: str, items: Iterable[Any]) -> None:
        with self._lock:
            self.lists.setdefault(name, []).extend(items)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "counters": dict(self.counters),
                "values": dict(self.values),
                "lists": {k: list(v) for k, v in self.lists.items()},
            }

    @staticmethod
    def merge(into: dict[str, Any], part: dict[str, Any]) -> dict[str, Any]:
        """Merge a snapshot ``part`` into the accumulated ``into`` (both in snapshot form)."""
        out = {
            "counters": dict(into.get("counters", {})),
            "values": dict(into.get("values", {})),
            "lists": {k: list(v) for k, v in into.get("lists", {}).items()},
        }
        for k, v in part.get("counters", {}).items():
            out["counters"][k] = out["counters"].get(k, 0) + v
        out["values"].update(part.get("values", {}))
        for k, v in part.get("lists", {}).items():
            out["lists"].setdefault(k, []).extend(v)
        return out


class _LoopThread:
    """One asyncio event loop in a daemon thread, shared by every stage of a process.

    I/O-bound stages (LLM calls) submit coroutines here from whichever thread runs their unit,
    so one loop multiplexes every request of the process and an LLM client's concurrency
    limit is shared across units.
    """

    _instance: _LoopThread | None = None
    _guard = threading.Lock()

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="trajsynth-aio", daemon=True
        )
        self.thread.start()

    @classmethod
    def get(cls) -> _LoopThread:
        with cls._guard:
            if cls._instance is None or not cls._instance.thread.is_alive():
                cls._instance = _LoopThread()
            return cls._instance

    def run(self, coro: Awaitable[T]) -> T:
        if threading.current_thread() is self.thread:
            raise RuntimeError("Context.run() called from inside the event loop; await instead")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()  # type: ignore[arg-type]


class Context:
    """What a stage may use: seed and RNGs, LLM roles, environments, logger, metrics.

    Built by the runner from a :class:`ContextSpec` in whichever process runs the stage.
    """

    def __init__(
        self,
        spec: ContextSpec | None = None,
        *,
        logger: logging.Logger | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        self.spec = spec or ContextSpec()
        self.log = logger or logging.getLogger(f"trajsynth.stage.{self.spec.stage_id}")
        self.metrics = Metrics()
        self._progress = progress
        #: per-context views of the process-wide LLM clients (each counts into self.metrics)
        self._llm_views: dict[str, Any] = {}
        self._envs: Any = None
        self._lock = threading.Lock()
        #: which unit (input shard) is being processed, for map stages; set by the runner
        self.unit: str | None = None
        self.input_name: str | None = None

    # -- identity ------------------------------------------------------------------------
    @property
    def stage_id(self) -> str:
        return self.spec.stage_id

    @property
    def seed(self) -> int:
        return self.spec.seed

    @property
    def run_id(self) -> str:
        return self.spec.run_id

    @property
    def config_hash(self) -> str:
        return self.spec.config_hash

    @property
    def iteration(self) -> int:
        return self.spec.iteration

    # -- randomness -----------------------------------------------------------------------
    def rng(self, *keys: Any) -> np.random.Generator:
        """A generator seeded by (run seed, stage id, ``keys``): same keys, same stream.

        Key it by what identifies the work (e.g. the row id), never by position in a batch,
        so results do not depend on sharding or parallelism.
        """
        return np.random.default_rng(seed_from(self.seed, self.stage_id, *keys))

    def row_seed(self, *keys: Any) -> int:
        """An integer seed derived like :meth:`rng` (for LLM requests, environments)."""
        return seed_from(self.seed, self.stage_id, *keys)

    # -- services -------------------------------------------------------------------------
    def llm(self, role: str) -> Any:
        """The LLM client for ``role`` (teacher, judge, ...).

        The underlying client (connection pool, endpoint limiter, cache) is built once per
        process and shared; what this returns is a view of it that counts token usage and
        cost into *this* context's metrics (``llm.<role>.*``), so that usage lands in the
        manifest under the stage — and unit — that spent it.
        """
        with self._lock:
            view = self._llm_views.get(role)
            if view is None:
                from ..llm import client_for_role

                view = client_for_role(role, self.spec.llm, spec=self.spec, metrics=self.metrics)
                self._llm_views[role] = view
            return view

    def use_checkpoint(self, role: str, folder: Path, **settings: Any) -> Any:
        """Make ``ctx.llm(role)`` the transformers model in ``folder`` (``backend: local``),
        e.g. the student a ``needs:`` stage just trained, for a stage that plays LLM roles;
        ``settings`` are other :class:`~trajsynth.llm.base.RoleConfig` fields. Nothing is
        cached: the checkpoint changes from one round to the next."""
        from ..llm.base import RoleConfig
        from ..llm.client import LLMClient, RoleClient
        from ..llm.local import LocalBackend

        config = RoleConfig.model_validate(
            {**settings, "backend": "local", "model": str(folder), "cache": False}
        )
        view = RoleClient(LLMClient(role, config, LocalBackend(config), None), self.metrics)
        with self._lock:
            self._llm_views[role] = view
        return view

    @property
    def envs(self) -> Any:
        """The environment factory (``ctx.envs.make(domain, seed=...)``)."""
        with self._lock:
            if self._envs is None:
                from ..envs import EnvFactory

                answer = None
                if "tool" in self.spec.llm:  # an LLM answers simulated tools' calls
                    from ..llm.tool_role import tool_answerer

                    answer = tool_answerer(self.spec.llm, spec=self.spec, metrics=self.metrics)
                self._envs = EnvFactory(self.spec.env, answer=answer)
            return self._envs

    # -- artifacts ------------------------------------------------------------------------
    @property
    def artifacts_dir(self) -> Path:
        """Where this stage writes files that are not rows (checkpoints, reports); the runner
        owns it: it is cleared when the stage reruns fresh and fingerprinted when it is done."""
        if not self.spec.artifacts_dir:
            raise RuntimeError("this context has no artifacts folder (not run by the runner)")
        path = Path(self.spec.artifacts_dir)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def needed_artifacts(self) -> list[Path]:
        """Artifact folders of the stages named in this stage's ``needs:``, in order."""
        return [Path(p) for p in self.spec.artifacts_in.values()]

    def artifact(self, stage_id: str) -> Path:
        """The artifact folder of needed stage ``stage_id``."""
        try:
            return Path(self.spec.artifacts_in[stage_id])
        except KeyError:
            raise KeyError(
                f"stage {self.stage_id!r} does not need {stage_id!r} "
                f"(needs: {list(self.spec.artifacts_in)})"
            ) from None

    # -- async ----------------------------------------------------------------------------
    def run(self, coro: Awaitable[T]) -> T:
        """Run a coroutine on the process's shared event loop and wait for its result."""
        return _LoopThread.get().run(coro)

    def gather(self, coros: Iterable[Awaitable[T]], *, limit: int | None = None) -> list[T]:
        """Run coroutines concurrently (at most ``limit`` at once) and return results in order."""

        async def _all() -> list[T]:
            if limit is None:
                return list(await asyncio.gather(*coros))
            sem = asyncio.Semaphore(limit)

            async def _one(c: Awaitable[T]) -> T:
                async with sem:
                    return await c

            return list(await asyncio.gather(*(_one(c) for c in coros)))

        return self.run(_all())

    def advance(self, rows: int) -> None:
        """Report progress inside a long unit (shown on the stage's progress bar)."""
        if self._progress is not None:
            self._progress(rows)

    # -- provenance -----------------------------------------------------------------------
    def provenance(
        self,
        *,
        method: str,
        parent_ids: Sequence[str] = (),
        generator: str = "",
        seed: int | None = None,
    ) -> dict[str, Any]:
        """Provenance columns for a row this stage makes."""
        return {
            "method": method,
            "stage_id": self.stage_id,
            "parent_ids": list(parent_ids),
            "generator": generator,
            "run_id": self.run_id,
            "config_hash": self.config_hash,
            "iteration": self.iteration,
            "seed": self.seed if seed is None else seed,
        }


# --------------------------------------------------------------------------------------
# stages
# --------------------------------------------------------------------------------------

Output = pa.RecordBatch | pa.Table | Sequence[Trajectory] | Emit


class Stage(ABC):
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

    def __init__(self, config: StageConfig | None = None) -> None:
        self.config = config if config is not None else self.Config()

    def setup(self, ctx: Context) -> None:
        """Acquire clients or models before the first batch (called once per process)."""

    def teardown(self) -> None:
        """Release what :meth:`setup` acquired."""

    def expected_rows(self) -> int | None:
        """Rows a source will make, when known (for the progress bar)."""
        return None

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


class SourceStage(Stage):
    """Makes rows from its config; resumable from an offset."""

    kind = StageKind.SOURCE
    inputs_range = (0, 0)

    @abstractmethod
    def generate(self, ctx: Context, offset: int = 0) -> Iterator[Output]:
        """Yield rows ``offset, offset+1, ...`` in a deterministic order."""

    def process(self, batches: Iterator[pa.RecordBatch], ctx: Context) -> Iterator[Output]:
        return self.generate(ctx, 0)


class MapStage(Stage):
    """Batch in, batches out; rows independent. Called once per input shard."""

    kind = StageKind.MAP
    inputs_range = (1, None)

    @abstractmethod
    def process(self, batches: Iterator[pa.RecordBatch], ctx: Context) -> Iterator[Output]:
        """Yield the rows made from ``batches``."""


class RowStage(MapStage):
    """A map stage written one row at a time.

    Implement either ``process_row(row, ctx) -> Iterable[Trajectory]`` (sync) or
    ``async aprocess_row(row, ctx) -> list[Trajectory]`` (async; rows of a batch then run
    concurrently, at most ``concurrency`` at once, on the shared event loop). Rows are read in
    batches of ``batch_rows`` so that async stages have enough rows in flight.
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

    def process(self, batches: Iterator[pa.RecordBatch], ctx: Context) -> Iterator[Output]:
        for batch in _rebatch(batches, self.batch_rows):
            rows = to_records(batch)
            if self._is_async():
                order = sorted(range(len(rows)), key=lambda i: -self.priority(rows[i]))
                done = ctx.gather(
                    (self.aprocess_row(rows[i], ctx) for i in order), limit=self.concurrency
                )
                results: list[Any] = [None] * len(rows)
                for i, res in zip(order, done, strict=True):
                    results[i] = res
            else:
                results = [list(self.process_row(r, ctx)) for r in rows]
            yield from _split_emits([x for res in results for x in res])
            ctx.advance(len(rows))


class GlobalStage(Stage):
    """Needs every row at once; ``process`` receives one iterator over all inputs' batches."""

    kind = StageKind.GLOBAL
    inputs_range = (1, None)

    @abstractmethod
    def process(self, batches: Iterator[pa.RecordBatch], ctx: Context) -> Iterator[Output]:
        """Yield the output rows, having seen (or streamed through) every input row."""


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
    main = [x for x in items if isinstance(x, Trajectory)]
    side: dict[str, list[Trajectory]] = {}
    for x in items:
        if isinstance(x, Emit):
            data = x.data
            if isinstance(data, Trajectory):
                side.setdefault(x.name, []).append(data)
            elif isinstance(data, (list, tuple)):
                side.setdefault(x.name, []).extend(data)
            else:
                side.setdefault(x.name, []).extend(to_records(data))
    if main:
        yield to_batch(main)
    for name, rows in side.items():
        yield Emit(name, to_batch(rows))


# --------------------------------------------------------------------------------------
# registry
# --------------------------------------------------------------------------------------

STAGES: dict[str, type[Stage]] = {}

#: modules that define built-in stages, imported on first lookup (keeps `trajsynth --help`
#: fast and torch out of processes that never train)
BUILTIN_STAGE_MODULES: list[str] = [
    "trajsynth.stages.utility",
    "trajsynth.stages.synthetic",
    "trajsynth.stages.verify",
    "trajsynth.stages.score",
    "trajsynth.stages.filter",
    "trajsynth.stages.dedup",
    "trajsynth.stages.diversity",
    "trajsynth.stages.difficulty",
    "trajsynth.stages.balance",
    "trajsynth.stages.magnet_tasks",
    "trajsynth.stages.rejection_sampling",
    "trajsynth.stages.director_actor",
    "trajsynth.stages.tsr",
    "trajsynth.stages.magnet_pairs",
    "trajsynth.stages.echo",
    "trajsynth.stages.steca",
    "trajsynth.stages.hardgen",
    "trajsynth.stages.arena",
    "trajsynth.stages.train",
    "trajsynth.stages.looptool_gcp",
    "trajsynth.stages.looptool_jglv",
    "trajsynth.stages.looptool_edde",
    "trajsynth.stages.looptool",
    "trajsynth.stages.looptool_report",
]
_loaded = False


def register(cls: type[Stage]) -> type[Stage]:
    """Class decorator: make ``cls`` available as ``uses: cls.name``."""
    if not cls.name:
        raise TypeError(f"{cls.__name__} has no `name`")
    if cls.name in STAGES and STAGES[cls.name] is not cls:
        existing = STAGES[cls.name]
        if (
            f"{existing.__module__}.{existing.__qualname__}"
            != f"{cls.__module__}.{cls.__qualname__}"
        ):
            raise TypeError(f"stage name {cls.name!r} already registered by {existing!r}")
    STAGES[cls.name] = cls
    return cls


def load_builtin_stages(extra_modules: Iterable[str] = ()) -> dict[str, type[Stage]]:
    """Import every built-in stage module (once), plus ``extra_modules`` (pipeline plugins)."""
    global _loaded
    if not _loaded:
        for mod in BUILTIN_STAGE_MODULES:
            try:
                importlib.import_module(mod)
            except ImportError as exc:
                # an optional dependency is missing: its stages are absent, the rest work
                logging.getLogger("trajsynth").debug("stage module %s not loaded: %s", mod, exc)
        try:
            from importlib.metadata import entry_points

            for ep in entry_points(group="trajsynth.stages"):
                ep.load()
        except Exception as exc:  # pragma: no cover - broken third-party plugin
            logging.getLogger("trajsynth").warning("stage plugin failed to load: %s", exc)
        _loaded = True
    for mod in extra_modules:
        try:
            importlib.import_module(mod)
        except ImportError as exc:
            raise ConfigError(f"plugin module {mod!r} cannot be imported: {exc}") from exc
    return STAGES


def get_stage(name: str) -> type[Stage]:
    """The stage class registered as ``name``; UnknownStageError with suggestions otherwise."""
    load_builtin_stages()
    try:
        return STAGES[name]
    except KeyError:
        close = difflib.get_close_matches(name, STAGES, n=3)
        hint = (
            f"did you mean {' or '.join(repr(c) for c in close)}?"
            if close
            else "run `trajsynth stages` for the list"
        )
        raise UnknownStageError(f"unknown stage {name!r}", hint=hint) from None


def build_stage(
    name: str, config: dict[str, Any] | StageConfig | None = None, *, where: str = ""
) -> Stage:
    """Instantiate stage ``name`` with ``config`` validated against its Config model."""
    cls = get_stage(name)
    if isinstance(config, StageConfig):
        return cls(config)
    try:
        cfg = cls.Config.model_validate(config or {})
    except ValidationError as exc:
        raise ConfigError(
            _format_validation(exc, prefix=where or f"stage {name!r}: with")
        ) from None
    return cls(cfg)


def _format_validation(exc: ValidationError, *, prefix: str) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"])
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        parts.append(f"{prefix}.{loc}: {msg}" if loc else f"{prefix}: {msg}")
    return "; ".join(parts)


def config_hash(name: str, config: StageConfig) -> str:
    return stable_hash({"uses": name, "with": config.model_dump(mode="json")})


# --------------------------------------------------------------------------------------
# decorator
# --------------------------------------------------------------------------------------


def stage(
    name: str,
    *,
    kind: str = "map",
    config: type[StageConfig] = StageConfig,
    reads: Sequence[str] = (),
    writes: Sequence[str] = (),
    outputs: Sequence[str] = ("main",),
) -> Callable[[Callable[..., Iterator[Output]]], type[Stage]]:
    """Turn a generator function into a registered stage class.

    ``fn(batches, ctx, config)`` for map/global stages, ``fn(ctx, config, offset)`` for
    sources. Example::

        @stage("max_calls", config=MaxCallsConfig, reads=("messages",))
        def max_calls(batches, ctx, config):
            for b in batches:
                yield b.filter(pc.less_equal(b["num_tool_calls"], config.max_calls))
    """
    base = {"map": MapStage, "global": GlobalStage, "source": SourceStage}[kind]

    def wrap(fn: Callable[..., Iterator[Output]]) -> type[Stage]:
        if kind == "source":

            def generate(self: Stage, ctx: Context, offset: int = 0) -> Iterator[Output]:
                return fn(ctx, self.config, offset)

            body: dict[str, Any] = {"generate": generate}
        else:

            def process(
                self: Stage, batches: Iterator[pa.RecordBatch], ctx: Context
            ) -> Iterator[Output]:
                return fn(batches, ctx, self.config)

            body = {"process": process}
        cls = type(
            fn.__name__,
            (base,),
            {
                "__doc__": fn.__doc__,
                "__module__": fn.__module__,
                "name": name,
                "Config": config,
                "reads": tuple(reads),
                "writes": tuple(writes),
                "outputs": tuple(outputs),
                **body,
            },
        )
        return register(cls)

    return wrap
