"""The context a stage runs in: seed and RNGs, LLM roles, environments, artifacts, metrics.

The runner builds one :class:`Context` per stage per process from a :class:`ContextSpec`
(plain data, so it travels to worker processes and machines). Async work of every stage in a
process runs on one shared event loop (:class:`_LoopThread`), so an LLM client's concurrency
limit holds across units.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ..core.ids import seed_from
from ..core.location import AnyPath, as_path, is_url, local_copy

if TYPE_CHECKING:
    from ..envs.factory import EnvFactory
    from ..llm.client import RoleClient

__all__ = ["Context", "ContextSpec", "Metrics"]

T = TypeVar("T")


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
    #: the run folder (a pipeline's ``--out``; for ``trajsynth stage``, the stage's ``--out``)
    run_dir: str | None = None
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

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if threading.current_thread() is self.thread:
            raise RuntimeError("Context.run() called from inside the event loop; await instead")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()


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
        self._llm_views: dict[str, RoleClient] = {}
        self._envs: EnvFactory | None = None
        #: the context whose environments (and lock) this one uses; None: its own
        self._envs_of: Context | None = None
        self._lock = threading.Lock()
        #: which unit (input shard) is being processed, for map stages; set by the runner
        self.unit: str | None = None
        self.input_name: str | None = None

    def for_unit(self, *, progress: Callable[[int], None] | None = None) -> Context:
        """A context for one unit (input shard) of this stage: the same spec and logger, and
        this context's environments (one factory: one MCP server, one sandbox for every unit)
        and lock, built on first use; its own metrics and LLM views, so what a unit spends
        is counted for that unit and merged by the runner. Its :meth:`close_envs` leaves the
        shared environments to this context's."""
        unit = Context(self.spec, logger=self.log, progress=progress)
        unit._envs_of = self
        unit._lock = self._lock
        return unit

    def use_client(self, role: str, client: RoleClient) -> None:
        """Make ``ctx.llm(role)`` return ``client`` (a checkpoint's, a scripted one in
        tests) instead of the client the role's settings make."""
        with self._lock:
            self._llm_views[role] = client

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
    def llm(self, role: str) -> RoleClient:
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

    def lost_to_infra(self, exc: BaseException, n: int = 1, *, unit: str = "rows") -> None:
        """Count ``n`` units (``rows`` or ``rollouts``) lost to an endpoint failure
        (:class:`~trajsynth.core.errors.InfraError`): dropped, not recorded as the model's
        failure. The runner reads ``infra.lost`` (and ``infra.units``, the units tried, where a
        stage counts them; else the rows in) for the stage's infrastructure error rate, which
        ``max_infra_error_rate`` bounds."""
        self.metrics.inc("infra.lost", n)
        self.metrics.set("infra.last_error", str(exc)[:500])
        self.metrics.set("infra.unit", unit)

    def use_checkpoint(self, role: str, folder: Path, **settings: Any) -> RoleClient:
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
        self.use_client(role, view)
        return view

    def close_envs(self) -> None:
        """Stop what the environments started (MCP servers, the sandbox) and save their
        records; the runner calls it when the stage is done. A unit's context
        (:meth:`for_unit`) closes nothing: the stage's context owns the environments."""
        if self._envs_of is not None:
            return
        with self._lock:
            envs, self._envs = self._envs, None
        if envs is not None:
            envs.close()

    @property
    def envs(self) -> EnvFactory:
        """The environment factory (``ctx.envs.make(domain, seed=...)``)."""
        if self._envs_of is not None:
            return self._envs_of.envs
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

    @property
    def run_dir(self) -> AnyPath:
        """The run's folder (where the manifest is), for files meant for the whole run: a
        local path, or a URL path (``upath.UPath``) for a run on object storage (write to it
        with ``trajsynth.core.location.put_bytes``)."""
        if not self.spec.run_dir:
            raise RuntimeError("this context has no run folder (not run by the runner)")
        return as_path(self.spec.run_dir)

    def needed_artifacts(self) -> list[Path]:
        """Artifact folders of the stages named in this stage's ``needs:``, in order (always
        local folders: those of a run on object storage are copied to this machine first)."""
        return [self.artifact(sid) for sid in self.spec.artifacts_in]

    def artifact(self, stage_id: str) -> Path:
        """The artifact folder of needed stage ``stage_id`` (a local folder)."""
        try:
            where = self.spec.artifacts_in[stage_id]
        except KeyError:
            raise KeyError(
                f"stage {self.stage_id!r} does not need {stage_id!r} "
                f"(needs: {list(self.spec.artifacts_in)})"
            ) from None
        if not is_url(where):
            return Path(where)
        with self._lock:
            return local_copy(where)

    # -- async ----------------------------------------------------------------------------
    def run(self, coro: Coroutine[Any, Any, T]) -> T:
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
