"""Executors: where the units of a map stage run.

A *unit* is one input shard of a map stage. :func:`run_map_unit` is the whole of a unit's work
(read the shard, run the stage, write one output shard per named output, atomically) and is a
plain top-level function of picklable arguments, so any executor can ship it anywhere: a
thread, a local process, or (later) a Ray task, without a stage knowing. The runner commits
each returned :class:`UnitResult` to the manifest in the driver process, one at a time.

- :class:`InlineExecutor` runs units one after another in the calling thread.
- :class:`LocalExecutor` runs CPU-bound units in a process pool and I/O-bound units (LLM
  calls) in threads that share one event loop, so every request of the process goes through
  one client and one concurrency limit.
- :class:`RayExecutor` runs units as Ray tasks, locally or on a cluster.

A new executor implements :meth:`Executor.run_units` and nothing else. Streaming global
stages (dedup, balance, concat, sample) also run per-shard passes through
:meth:`Executor.map` (a top-level function over argument tuples, results in order), which the
local executor runs in its process pool and the Ray executor as Ray tasks; by default it runs
inline.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
import tempfile
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..core import sockets
from ..core.location import as_path
from ..stages import Context, ContextSpec, Stage, build_stage
from ..store.shards import (
    DEFAULT_COMPRESSION,
    LOOKUP,
    Check,
    ShardInfo,
    ShardWriter,
    iter_shard,
)
from .outputs import output_names, write_outputs

__all__ = [
    "Executor",
    "InlineExecutor",
    "LocalExecutor",
    "RayExecutor",
    "UnitResult",
    "UnitTask",
    "run_map_unit",
]


@dataclass(frozen=True)
class UnitTask:
    """Everything needed to run one unit anywhere (all fields picklable)."""

    stage_id: str
    uses: str
    config: dict[str, Any]
    ctx_spec: dict[str, Any]
    cache_key: str
    unit_key: str
    unit_index: int
    input_path: str
    input_name: str
    out_dir: str
    outputs: tuple[str, ...]
    plugins: tuple[str, ...] = ()
    compression: str = DEFAULT_COMPRESSION
    rows: int = 0
    #: what the input shard's bytes must be (the runner's record of it; see store.shards)
    input_check: Check = LOOKUP


@dataclass
class UnitResult:
    unit_key: str
    shards: dict[str, ShardInfo | None]
    rows_in: int
    metrics: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


# one built stage (and context) per stage per process, so setup() runs once per process
_BUILT: dict[tuple[str, str], tuple[Stage[Any], Context]] = {}
_BUILT_LOCK = threading.Lock()


def _stage_for(task: UnitTask) -> tuple[Stage[Any], Context]:
    key = (task.stage_id, task.cache_key)
    with _BUILT_LOCK:
        if key not in _BUILT:
            from ..stages import load_builtin_stages

            load_builtin_stages(task.plugins)
            stage = build_stage(task.uses, task.config)
            ctx = Context(ContextSpec.model_validate(task.ctx_spec))
            stage.setup(ctx)
            _BUILT[key] = (stage, ctx)
        return _BUILT[key]


def release_stages(stage_id: str | None = None) -> None:
    """Tear down stages built in this process (all, or one stage's)."""
    with _BUILT_LOCK:
        for key in [k for k in _BUILT if stage_id is None or k[0] == stage_id]:
            stage, ctx = _BUILT.pop(key)
            stage.teardown()
            ctx.close_envs()


Progress = Callable[[str, int], None]
"""``progress(unit_key, rows)``: rows of a unit processed so far (live, from threads)."""


def run_map_unit(task: UnitTask, progress: Progress | None = None) -> UnitResult:
    """Run one unit: read its shard, run the stage, write its output shards atomically."""
    start = time.perf_counter()
    stage, shared_ctx = _stage_for(task)
    # a per-unit context shares the process's environments (LLM clients are process-wide
    # already) but has its own metrics, so usage is counted per unit and merged
    live = None if progress is None else (lambda n: progress(task.unit_key, n))
    ctx = shared_ctx.for_unit(progress=live)
    ctx.unit, ctx.input_name = task.unit_key, task.input_name

    rows_in = 0

    def batches() -> Iterator[pa.RecordBatch]:
        nonlocal rows_in
        for b in iter_shard(as_path(task.input_path), check=task.input_check):
            rows_in += b.num_rows
            yield b

    def one_shard(name: str, folder: Path) -> ShardWriter:
        # the unit's rows of each output make one shard, named after the unit; units write
        # into the same folders at once, so none of them clears temporary files there
        return ShardWriter(
            folder,
            shard_rows=None,
            start_index=task.unit_index,
            compression=task.compression,
            where=where,
            clean=False,
        )

    where = f"stage {task.stage_id!r}"
    writers = write_outputs(
        stage.process(batches(), ctx),
        stage_dir=as_path(task.out_dir),
        outputs=task.outputs,
        writer=one_shard,
        where=where,
    )
    shards: dict[str, ShardInfo | None] = {}
    for name in output_names(task.outputs):
        written = writers[name].shards if name in writers else []
        shards[name] = written[0] if written else None
    # answers cached on this machine for a run on object storage reach the bucket with the
    # unit, so a resume on any machine finds them
    from ..llm.cache import sync_remote_caches

    sync_remote_caches()
    # when the stage wrote nothing for this unit it still counts as done (None shard)
    return UnitResult(
        unit_key=task.unit_key,
        shards=shards,
        rows_in=rows_in,
        metrics=ctx.metrics.snapshot(),
        seconds=time.perf_counter() - start,
    )


class Executor(ABC):
    """Runs the units of a map stage and yields their results as they complete."""

    name = "executor"

    @abstractmethod
    def run_units(
        self, tasks: Sequence[UnitTask], *, io_bound: bool, progress: Progress | None = None
    ) -> Iterator[UnitResult]:
        """Run ``tasks``; yield each result when it is done (any order)."""

    def map(
        self, fn: Callable[..., Any], args: Sequence[tuple[Any, ...]], rows: int = 0
    ) -> list[Any]:
        """``[fn(*a) for a in args]`` (``fn`` a top-level function, ``args`` picklable): the
        per-shard passes of streaming global stages; ``rows`` is how many input rows they
        cover in all. Default: inline."""
        return [fn(*a) for a in args]

    def close(self) -> None:
        """Release workers."""


class InlineExecutor(Executor):
    """Units one after another in the calling thread (debugging, tiny inputs)."""

    name = "inline"

    def run_units(
        self, tasks: Sequence[UnitTask], *, io_bound: bool, progress: Progress | None = None
    ) -> Iterator[UnitResult]:
        for task in tasks:
            yield run_map_unit(task, progress)


class LocalExecutor(Executor):
    """Process pool for CPU-bound stages, threads for I/O-bound ones, inline for one unit."""

    name = "local"

    def __init__(
        self, workers: int = 0, io_concurrency: int = 4, pool_min_rows: int = 20_000
    ) -> None:
        self.workers = workers or (os.cpu_count() or 1)
        self.io_concurrency = io_concurrency
        #: below this many input rows a process pool costs more (worker start-up, imports)
        #: than it saves, and CPU-bound units run inline
        self.min_rows_for_pool = pool_min_rows
        self._pool: cf.ProcessPoolExecutor | None = None

    def _process_pool(self) -> cf.ProcessPoolExecutor:
        if self._pool is None:
            # the forkserver listens on a Unix socket in the temporary folder: under a deep
            # one its path is too long for the system, and spawn (pipes only) starts workers
            method = "spawn"
            if "forkserver" in mp.get_all_start_methods() and sockets.fits(
                tempfile.gettempdir(), sockets.FORKSERVER_SOCKET_ROOM
            ):
                method = "forkserver"
            mp_ctx = mp.get_context(method)
            if method == "forkserver":
                mp_ctx.set_forkserver_preload(["trajsynth.pipeline.executors"])
            # a forkserver started earlier in this process (a notebook, a test session) would
            # hand its workers the environment of that moment: they get this one (object
            # storage credentials and endpoints set since, the scratch folder)
            self._pool = cf.ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=mp_ctx,
                initializer=_take_environment,
                initargs=(dict(os.environ),),
            )
        return self._pool

    def run_units(
        self, tasks: Sequence[UnitTask], *, io_bound: bool, progress: Progress | None = None
    ) -> Iterator[UnitResult]:
        small = sum(t.rows for t in tasks) < self.min_rows_for_pool
        if len(tasks) <= 1 or (not io_bound and (self.workers <= 1 or small)):
            yield from InlineExecutor().run_units(tasks, io_bound=io_bound, progress=progress)
            return
        if io_bound:
            pool: cf.Executor = cf.ThreadPoolExecutor(
                max_workers=self.io_concurrency, thread_name_prefix="trajsynth-unit"
            )
            futures = [pool.submit(run_map_unit, t, progress) for t in tasks]
        else:
            pool = self._process_pool()
            futures = [pool.submit(run_map_unit, t) for t in tasks]
        try:
            for fut in cf.as_completed(futures):
                yield fut.result()
        finally:
            for fut in futures:
                fut.cancel()
            if io_bound:
                pool.shutdown(wait=True, cancel_futures=True)

    def map(
        self, fn: Callable[..., Any], args: Sequence[tuple[Any, ...]], rows: int = 0
    ) -> list[Any]:
        if len(args) <= 1 or self.workers <= 1 or rows < self.min_rows_for_pool:
            return [fn(*a) for a in args]
        pool = self._process_pool()
        futures = [pool.submit(fn, *a) for a in args]
        try:
            return [f.result() for f in futures]
        finally:
            for f in futures:
                f.cancel()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def _take_environment(env: dict[str, str]) -> None:
    """A pool worker's environment: the driver's when it made the pool."""
    os.environ.clear()
    os.environ.update(env)


class RayExecutor(Executor):
    """Units as Ray tasks, on a local Ray runtime or a cluster (``address="auto"``).

    Each unit is :func:`run_map_unit` shipped as a Ray task; the driver still commits results
    one by one, so exactly-once output and resume work as with the local executor. Stages do
    not change. On a cluster the run folder must be on storage every node mounts at the same
    path (NFS, ...), or be a bucket URL (``--out s3://bucket/run``), which every node reads
    and writes itself.
    I/O-bound stages run with ``num_cpus=0`` per unit (they wait on the network) and so many
    more of them run at once than there are cores. The address is ``address``, else the
    ``TRAJSYNTH_RAY_ADDRESS`` environment variable, else a local Ray runtime.
    """

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        *,
        num_cpus: float = 1.0,
        init_kwargs: dict[str, Any] | None = None,
    ) -> None:
        try:
            import ray
        except ImportError as exc:  # pragma: no cover - depends on the extra
            from ..core.errors import ConfigError

            raise ConfigError(
                "the ray executor needs Ray", hint="pip install 'trajsynth[ray]'"
            ) from exc
        self._ray = ray
        address = address or os.environ.get("TRAJSYNTH_RAY_ADDRESS") or None
        if not ray.is_initialized():
            kwargs = {"include_dashboard": False, "log_to_driver": False, **(init_kwargs or {})}
            temp_dir = None if address else sockets.ray_temp_dir()
            if temp_dir is not None:  # Ray's default folder is too deep for its sockets
                kwargs.setdefault("_temp_dir", temp_dir)
            ray.init(address=address, ignore_reinit_error=True, **kwargs)
        self._cpu = ray.remote(num_cpus=num_cpus)(run_map_unit)
        self._io = ray.remote(num_cpus=0)(run_map_unit)
        self._pending: list[Any] = []
        self._num_cpus = num_cpus
        self._remote_fns: dict[Any, Any] = {}

    def run_units(
        self, tasks: Sequence[UnitTask], *, io_bound: bool, progress: Progress | None = None
    ) -> Iterator[UnitResult]:
        remote = self._io if io_bound else self._cpu
        self._pending = [remote.remote(t) for t in tasks]
        try:
            while self._pending:
                done, self._pending = self._ray.wait(self._pending, num_returns=1)
                for ref in done:
                    yield self._ray.get(ref)
        finally:
            for ref in self._pending:
                self._ray.cancel(ref, force=True)
            self._pending = []

    def map(
        self, fn: Callable[..., Any], args: Sequence[tuple[Any, ...]], rows: int = 0
    ) -> list[Any]:
        """One Ray task per argument tuple (e.g. per shard, or per LSH band), results in order."""
        remote = self._remote_fns.get(fn)
        if remote is None:
            remote = self._remote_fns[fn] = self._ray.remote(num_cpus=self._num_cpus)(fn)
        self._pending = [remote.remote(*a) for a in args]
        try:
            return list(self._ray.get(self._pending))
        finally:
            self._pending = []

    def close(self) -> None:
        """Leave the Ray runtime up (it may be shared); cancel what is still running."""
        for ref in self._pending:
            self._ray.cancel(ref, force=True)
        self._pending = []
