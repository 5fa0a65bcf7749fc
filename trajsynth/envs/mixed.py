"""The ``mixed`` environment: one toolset whose tools are executed by different backends,
e.g. the few tools someone implemented in Python (``code``) and the rest answered by the
stateful simulator (``simulated``), behind the one :class:`~trajsynth.envs.base.Environment`
interface.

Steps:

1) routing: every tool has one owner (a part: a whole environment of one backend that offers
   exactly the tools it owns); a call goes to its owner's part (an unknown tool goes to the
   default part, which answers ``unknown_tool`` as every environment does);
2) reset: every part is reset with the task. A task's ``initial_state`` is split by key: the
   keys that name a ``code`` part's classes go to that part, the rest to the other parts;
3) snapshot / restore: a snapshot holds every part's snapshot; restore restores each;
4) state: ``state()`` is the parts' tables side by side (a table name two parts share is
   prefixed with its backend, ``"code.orders"``); ``diff`` is the parts' diffs in backend
   order, tables named the same way; ``state_hash`` is the stable hash of the parts' hashes
   by backend name, so it changes when any part changes and is equal across processes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.ids import stable_hash
from ..core.schema import ToolCall
from ..core.task import GroundTruth
from .base import Environment, EnvSnapshot, ToolResult
from .spec import Toolset
from .state import Change, StateDiff

__all__ = ["MixedEnvironment"]


class MixedEnvironment(Environment):
    """Tools of one toolset run by several backends (see the module docstring)."""

    def __init__(
        self,
        domain: str,
        toolset: Toolset,
        parts: Mapping[str, Environment],
        owners: Mapping[str, str],
        *,
        default: str,
        initial_state: Mapping[str, Any] | None = None,
        max_steps: int = 64,
        max_observation_chars: int | None = 16_000,
    ) -> None:
        super().__init__(max_steps=max_steps, max_observation_chars=max_observation_chars)
        if default not in parts or any(b not in parts for b in owners.values()):
            raise ValueError("every owner (and the default) must be one of the parts")
        self.domain = domain
        self.toolset = toolset
        self.parts = dict(sorted(parts.items()))
        self.owners = dict(owners)
        self.default = default
        tables: dict[str, list[str]] = {}
        for backend, part in self.parts.items():
            for table in part.state():
                tables.setdefault(table, []).append(backend)
        self._shared = {t for t, owners_ in tables.items() if len(owners_) > 1}
        if initial_state is not None:  # each part starts from its share (step 2)
            for b, share in self._split(initial_state).items():
                part = self.parts[b]
                # simulated, code and MCP environments (a mixed toolset's backends) have it
                part.initial_state = share  # type: ignore[attr-defined]
                part.reset(None)

    def part(self, tool: str) -> Environment:
        """The environment that runs ``tool`` (step 1)."""
        return self.parts[self.owners.get(tool, self.default)]

    def _table(self, backend: str, table: str) -> str:
        return f"{backend}.{table}" if table in self._shared else table

    # 1) a call
    def _execute(self, call: ToolCall) -> ToolResult:
        return self.part(call.name).execute(call)

    def _is_terminal(self, name: str) -> bool:
        return self.part(name)._is_terminal(name)

    # 2) reset
    def _split(self, init: Mapping[str, Any] | None) -> dict[str, dict[str, Any] | None]:
        if init is None:
            return {b: None for b in self.parts}
        claimed: dict[str, set[str]] = {
            b: set(getattr(p, "objects", {})) for b, p in self.parts.items()
        }
        taken = set().union(*claimed.values())
        out: dict[str, dict[str, Any] | None] = {}
        for b in self.parts:
            keys = claimed[b] if claimed[b] else {k for k in init if k not in taken}
            out[b] = {k: v for k, v in init.items() if k in keys}
        return out

    def _reset(self, task: GroundTruth | None) -> None:
        if task is None:
            for part in self.parts.values():
                part.reset(None)
            return
        split = self._split(task.initial_state)
        for b, part in self.parts.items():
            part.reset(task.model_copy(update={"initial_state": split[b]}))

    # 3) snapshots
    def _snapshot_state(self) -> dict[str, EnvSnapshot]:
        return {b: p.snapshot() for b, p in self.parts.items()}

    def _restore_state(self, state: dict[str, EnvSnapshot]) -> None:
        for b, snap in state.items():
            self.parts[b].restore(snap)

    # 4) state
    def state_hash(self) -> str:
        return stable_hash([[b, p.state_hash()] for b, p in self.parts.items()])

    def state(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for b, part in self.parts.items():
            for table, rows in part.state().items():
                out[self._table(b, table)] = rows
        return dict(sorted(out.items()))

    def diff(self, a: EnvSnapshot, b: EnvSnapshot | None = None) -> StateDiff:
        changes: list[Change] = []
        for backend, part in self.parts.items():
            after = b.state[backend] if b is not None else None
            for c in part.diff(a.state[backend], after):
                name = self._table(backend, c.table)
                if name != c.table:
                    c = Change(name, c.key, c.kind, c.before, c.after, c.fields)
                changes.append(c)
        return StateDiff(tuple(changes))

    def close(self) -> None:
        for part in self.parts.values():
            part.close()
