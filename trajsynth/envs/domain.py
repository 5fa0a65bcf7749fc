"""A built-in domain (tools + seeded state + example tasks) and the environment that runs it.

A :class:`Domain` is data: its :class:`~trajsynth.envs.tools.ToolImpl` list, a function that
builds the initial tables for a seed, and its hand-written example tasks. A
:class:`DomainEnvironment` runs one episode against it:

1) load: the seeded initial state comes from a per-domain cache (built once per seed, then
   each environment starts from a snapshot of it in O(number of tables)); a task's
   ``initial_state`` is merged on top, two levels deep (``{table: {key: record}}``; a record
   given replaces the seeded one, ``None`` deletes it);
2) execute a call: unknown tool → ``unknown_tool``; arguments that are not a JSON object →
   ``malformed_arguments``; arguments that break the tool's schema → the first
   :mod:`~trajsynth.envs.verifiers.schema` category (every issue is in the message); then the
   tool runs, and a :class:`~trajsynth.envs.tools.ToolError` becomes an error result;
3) a writing tool is atomic: if it fails, the state is restored to just before the call;
4) hash, snapshot, restore and diff delegate to :class:`~trajsynth.envs.state.State`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core.schema import ToolCall
from ..core.task import GroundTruth
from .base import Environment, EnvSnapshot, ToolResult
from .calls import error_result, read_arguments
from .spec import Toolset
from .state import Snapshot, State, StateDiff, diff
from .tools import ToolError, ToolImpl

__all__ = ["Domain", "DomainEnvironment", "apply_overrides"]

log = logging.getLogger("trajsynth.envs")


@dataclass(eq=False)
class Domain:
    """A built-in executable domain."""

    name: str
    description: str
    tools: list[ToolImpl]
    build_state: Callable[[int], dict[str, dict[str, Any]]]
    #: returns the authored example tasks (see trajsynth.envs.tasks)
    authored_tasks: Callable[[], list[Any]] = field(default=lambda: [])
    #: domain rules for an agent's system prompt
    policy: str = ""

    def __post_init__(self) -> None:
        names = [t.name for t in self.tools]
        if len(set(names)) != len(names):
            raise ValueError(f"domain {self.name}: duplicate tool names")
        self._base = functools.lru_cache(maxsize=32)(self._build_base)

    def toolset(self) -> Toolset:
        return Toolset(name=self.name, tools=[t.spec for t in self.tools], format="builtin")

    def _build_base(self, seed: int) -> Snapshot:
        return State(self.build_state(seed)).snapshot()

    def base_snapshot(self, seed: int) -> Snapshot:
        """The initial state for ``seed`` (built once per process and seed, then shared)."""
        return self._base(seed)

    def make(
        self,
        *,
        seed: int = 0,
        initial_state: Mapping[str, Any] | None = None,
        extra_tools: list[ToolImpl] | None = None,
        **kwargs: Any,
    ) -> DomainEnvironment:
        return DomainEnvironment(
            self, seed=seed, initial_state=initial_state, extra_tools=extra_tools, **kwargs
        )


def apply_overrides(state: State, overrides: Mapping[str, Any]) -> None:
    """Step 1: merge ``{table: {key: record | None}}`` into ``state``."""
    for table, rows in overrides.items():
        if not isinstance(rows, Mapping):
            raise ValueError(f"initial_state[{table!r}] must map keys to records")
        for key, record in rows.items():
            if record is None:
                if state.has(table, key):
                    state.delete(table, key)
            else:
                state.put(table, str(key), record)


class DomainEnvironment(Environment):
    """An episode in a built-in domain (steps 1-4 of the module docstring)."""

    def __init__(
        self,
        domain: Domain,
        *,
        seed: int = 0,
        initial_state: Mapping[str, Any] | None = None,
        extra_tools: list[ToolImpl] | None = None,
        validate_arguments: bool = True,
        max_steps: int = 64,
        max_observation_chars: int | None = 16_000,
    ) -> None:
        super().__init__(max_steps=max_steps, max_observation_chars=max_observation_chars)
        self.spec_domain = domain
        self.domain = domain.name
        self.impls: dict[str, ToolImpl] = {t.name: t for t in domain.tools}
        for t in extra_tools or []:
            if t.name in self.impls:
                raise ValueError(f"extra tool {t.name!r} clashes with a {domain.name} tool")
            self.impls[t.name] = t
        self.toolset = Toolset(name=domain.name, tools=[t.spec for t in self.impls.values()])
        self.validate_arguments = validate_arguments
        self.seed = seed
        self.initial_state = dict(initial_state) if initial_state else None
        self.db = State()
        self._load(seed, self.initial_state)

    # 1) load
    def _load(self, seed: int, initial_state: Mapping[str, Any] | None) -> None:
        self.db = State.from_snapshot(self.spec_domain.base_snapshot(seed))
        if initial_state:
            apply_overrides(self.db, initial_state)

    def _reset(self, task: GroundTruth | None) -> None:
        if task is None:
            self._load(self.seed, self.initial_state)
        else:
            init = task.initial_state if task.initial_state is not None else self.initial_state
            self._load(task.env_seed, init)

    # 2) execute
    def _execute(self, call: ToolCall) -> ToolResult:
        impl = self.impls.get(call.name)
        args = read_arguments(call, impl.spec if impl else None, validate=self.validate_arguments)
        if isinstance(args, ToolResult):
            return args
        assert impl is not None
        # 3) atomic writes
        before = self.db.snapshot() if impl.writes else None
        try:
            output = impl(self.db, args)
        except ToolError as exc:
            if before is not None:
                self.db.restore(before)
            return error_result(call, args, exc.category, exc.message)
        except Exception as exc:  # a bug in a tool: reported as data, logged for us
            if before is not None:
                self.db.restore(before)
            log.warning("tool %s crashed: %r", call.name, exc, exc_info=True)
            return error_result(call, args, "tool_crashed", f"{type(exc).__name__}: {exc}")
        return ToolResult(call_id=call.id, name=call.name, arguments=args, output=output)

    def _is_terminal(self, name: str) -> bool:
        impl = self.impls.get(name)
        return bool(impl and impl.terminal)

    # 4) state
    def _snapshot_state(self) -> Snapshot:
        return self.db.snapshot()

    def _restore_state(self, state: Snapshot) -> None:
        self.db.restore(state)

    def state_hash(self) -> str:
        return self.db.hash()

    def state(self) -> dict[str, Any]:
        return self.db.to_json()

    def diff(self, a: EnvSnapshot, b: EnvSnapshot | None = None) -> StateDiff:
        return diff(a.state, self.db if b is None else b.state)
