"""An episode against an MCP server: :class:`MCPEnvironment`.

The environment's state is the log of the calls that changed the server (see
:mod:`.server`); several environments share one server, which is brought to an episode's
log before each of its calls:

1) a call: unknown tool / malformed or schema-breaking arguments → error observations, as
   in every environment; then :meth:`MCPServer.ensure` (the server to this episode's log),
   the call, and, when it changed the server, the call joins the log;
2) ``snapshot``/``restore`` copy the log; ``state_hash`` is the hash of the ``state_tool``'s
   answer when the server has one (equal states, equal hashes, whatever the order of the
   calls), else of the log; ``diff`` compares the state tool's answers (top-level keys as
   tables), else the logs.

Every episode starts from the server's initial state (a task's ``initial_state`` is not sent
to the server).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ...core.ids import canonical_json, stable_hash
from ...core.schema import ToolCall
from ...core.task import GroundTruth
from ..base import Environment, EnvSnapshot, ToolResult
from ..calls import read_arguments
from ..spec import Toolset
from ..state import State, StateDiff, diff
from .server import Calls, MCPServer

__all__ = ["MCPEnvironment"]


class MCPEnvironment(Environment):
    """An episode against an MCP server (see the module docstring)."""

    def __init__(
        self,
        domain: str,
        server: MCPServer,
        toolset: Toolset,
        *,
        seed: int = 0,
        initial_state: Mapping[str, Any] | None = None,
        validate_arguments: bool = True,
        max_steps: int = 64,
        max_observation_chars: int | None = 16_000,
    ) -> None:
        super().__init__(max_steps=max_steps, max_observation_chars=max_observation_chars)
        self.domain = domain
        self.server = server
        self.toolset = toolset
        self.seed = seed
        self.initial_state = dict(initial_state) if initial_state else None
        self.validate_arguments = validate_arguments
        self.calls: Calls = ()

    def _reset(self, task: GroundTruth | None) -> None:
        if task is not None:
            self.seed = task.env_seed
        self.calls = ()

    def _execute(self, call: ToolCall) -> ToolResult:
        spec = self.toolset.get(call.name)
        args = read_arguments(call, spec, validate=self.validate_arguments)
        if isinstance(args, ToolResult):
            return args
        assert spec is not None
        with self.server.lock:
            self.server.ensure(self.calls)
            output, error = self.server.call(spec.name, args)
            if error is None and self.server.changed(spec.name):
                self.calls = (*self.calls, (spec.name, canonical_json(args)))
            self.server.current = self.calls
        if error is not None:
            return ToolResult(call.id, call.name, args, error=error)
        return ToolResult(call.id, call.name, args, output=output)

    def value_hints(self) -> dict[str, Any]:
        """Values the server accepts, found once per server by calling its read-only tools
        (:func:`.probe.probe`)."""
        with self.server.lock:
            if self.server.value_hints is None:
                from .probe import probe

                self.server.value_hints = probe(self.server, self.toolset)
            return self.server.value_hints

    def _snapshot_state(self) -> Calls:
        return self.calls

    def _restore_state(self, state: Calls) -> None:
        self.calls = state

    def _extra(self) -> dict[str, Any]:
        return {"seed": self.seed}

    def _restore_extra(self, extra: dict[str, Any]) -> None:
        self.seed = extra.get("seed", self.seed)

    def state(self) -> dict[str, Any]:
        found = self.server.state(self.calls)
        if found is None:
            return {"calls": [[n, json.loads(a)] for n, a in self.calls]}
        return found if isinstance(found, dict) else {"state": found}

    def state_hash(self) -> str:
        return stable_hash(self.state())

    def diff(self, a: EnvSnapshot, b: EnvSnapshot | None = None) -> StateDiff:
        def tables(calls: Calls) -> State:
            found = self.server.state(calls)
            if not isinstance(found, dict):
                found = {"calls": {str(i): [n, a] for i, (n, a) in enumerate(calls)}}
            return State({k: v if isinstance(v, dict) else {"value": v}
                          for k, v in found.items()})  # fmt: skip

        return diff(tables(a.state), tables(self.calls if b is None else b.state))
