"""The ``mcp`` environment: tools served by a Model Context Protocol server, executed for real
(https://modelcontextprotocol.io; the ``mcp`` Python SDK, ``pip install 'trajsynth[mcp]'``),
over stdio (a command the factory starts) or streamable HTTP (a URL).

A server holds one live state, while search and RL methods branch an episode from snapshots
and run many episodes at once. So the environment's state is the *log* of the calls that
changed the server (every successful call to a tool not annotated ``readOnlyHint``), and the
server is brought to an episode's state before each call:

1) connect (:class:`MCPServer`, one per toolset and factory): the SDK's client runs on a
   private event loop in its own thread, in one long-lived task; calls from any thread are
   queued to it and serialized by a lock. The server's tools become the toolset (the
   ``inputSchema`` as parameters, the ``outputSchema`` as response), less the reset and
   state tools, which are the harness's;
2) a call: unknown tool / malformed or schema-breaking arguments → error observations, as
   in every environment; then, if the server holds another log than the episode's, it is
   reset (the ``reset_tool``, else, over stdio, a restart) and the episode's log replayed;
   the call runs; ``isError`` → an ``invalid_value`` error observation (the server's
   message); the output is the structured content, else the text (parsed when JSON);
3) ``snapshot``/``restore`` copy the log; ``state_hash`` is the hash of the ``state_tool``'s
   answer when the server has one (equal states, equal hashes, whatever the order of the
   calls), else of the log; ``diff`` compares the state tool's answers (top-level keys as
   tables).

Replaying a log gives the same state only if the server is deterministic given its calls
(no clock, no randomness): the same requirement every environment keeps. Every episode starts
from the server's reset state (a task's ``initial_state`` is not sent to the server).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures as cf
import contextlib
import json
import logging
import shlex
import sys
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from pydantic import Field, model_validator

from ..core.config import StrictModel
from ..core.errors import ConfigError
from ..core.ids import canonical_json, stable_hash
from ..core.schema import ToolCall
from ..core.task import GroundTruth
from .base import Environment, EnvSnapshot, ToolResult
from .calls import read_arguments
from .spec import Toolset, ToolSpec
from .state import State, StateDiff, diff
from .tools import ToolError

__all__ = ["MCPConfig", "MCPEnvironment", "MCPServer"]

log = logging.getLogger("trajsynth.envs")


class MCPConfig(StrictModel):
    """Where the server is and which of its tools belong to the harness."""

    command: list[str] | str | None = Field(
        default=None, description="Start the server with this command and talk over stdio."
    )
    url: str | None = Field(default=None, description="A streamable HTTP endpoint (…/mcp).")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment (stdio).")
    reset_tool: str | None = Field(
        default="reset", description="Tool that returns the server to its initial state."
    )
    state_tool: str | None = Field(
        default="state", description="Read-only tool that returns the whole state as JSON."
    )
    timeout_s: float = Field(default=60.0, gt=0, description="Longest wait for one request.")

    @model_validator(mode="after")
    def _one_transport(self) -> MCPConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("an MCP server needs exactly one of `command` (stdio) or `url`")
        return self

    def argv(self) -> list[str]:
        cmd = self.command if isinstance(self.command, list) else shlex.split(self.command or "")
        return [sys.executable if c == "python" else c for c in cmd]


class MCPServer:
    """One connection to an MCP server (step 1), usable from any thread."""

    def __init__(self, config: MCPConfig) -> None:
        self.config = config
        self.lock = threading.RLock()
        self.current: tuple[tuple[str, str], ...] | None = None  # the log the server holds
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[Any] | None = None
        self._task: cf.Future[Any] | None = None
        self._tools: list[Any] | None = None
        self._states: dict[tuple[tuple[str, str], ...], Any] = {}
        atexit.register(self.close)

    # -- the session task ------------------------------------------------------------------
    def _start(self) -> None:
        try:
            from mcp import Client, StdioServerParameters
        except ImportError as exc:
            raise ConfigError(
                "the mcp backend needs the MCP SDK", hint="pip install 'trajsynth[mcp]'"
            ) from exc
        cfg = self.config
        if cfg.url:
            target: Any = cfg.url
        else:
            argv = cfg.argv()
            target = StdioServerParameters(command=argv[0], args=argv[1:], env=cfg.env or None)
        loop = asyncio.new_event_loop()
        threading.Thread(target=loop.run_forever, name="trajsynth-mcp", daemon=True).start()
        ready: cf.Future[None] = cf.Future()

        async def serve() -> None:
            self._queue = asyncio.Queue()
            try:
                async with Client(target, cache=None) as client:
                    ready.set_result(None)
                    while True:
                        item = await self._queue.get()
                        if item is None:
                            break
                        fn, fut = item
                        try:
                            fut.set_result(await fn(client))
                        except Exception as exc:
                            fut.set_exception(exc)
            except Exception as exc:
                if not ready.done():
                    ready.set_exception(exc)
                else:
                    log.warning("MCP session ended: %r", exc)

        self._loop = loop
        self._task = asyncio.run_coroutine_threadsafe(serve(), loop)
        try:
            ready.result(timeout=cfg.timeout_s)
        except Exception as exc:
            self.close()
            where = cfg.url or " ".join(cfg.argv())
            raise ConfigError(f"cannot connect to the MCP server {where} ({exc})") from exc

    def _submit(self, fn: Callable[[Any], Awaitable[Any]]) -> Any:
        with self.lock:
            if self._loop is None:
                self._start()
            fut: cf.Future[Any] = cf.Future()
            assert self._loop is not None and self._queue is not None
            self._loop.call_soon_threadsafe(self._queue.put_nowait, (fn, fut))
            return fut.result(timeout=self.config.timeout_s)

    def close(self) -> None:
        """Stop the session (and, over stdio, the server process)."""
        with self.lock:
            loop, queue, task = self._loop, self._queue, self._task
            self._loop = self._queue = self._task = None
            self.current = None
        if loop is None:
            return
        if queue is not None:
            loop.call_soon_threadsafe(queue.put_nowait, None)
        if task is not None:
            with contextlib.suppress(Exception):
                task.result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)

    # -- requests --------------------------------------------------------------------------
    def tools(self) -> list[Any]:
        """The server's tools (``mcp.types.Tool``), listed once."""
        if self._tools is None:

            async def fetch(client: Any) -> list[Any]:
                out, cursor = [], None
                while True:
                    page = await client.list_tools(cursor=cursor)
                    out += page.tools
                    cursor = page.next_cursor
                    if not cursor:
                        return out

            self._tools = self._submit(fetch)
        return self._tools

    def read_only(self, name: str) -> bool:
        tool = next((t for t in self.tools() if t.name == name), None)
        return bool(tool and tool.annotations and tool.annotations.read_only_hint)

    def call(self, name: str, arguments: dict[str, Any]) -> tuple[Any, dict[str, str] | None]:
        """Run one call: (output, None) or (None, error)."""

        async def run(client: Any) -> Any:
            return await client.call_tool(name, arguments)

        result = self._submit(run)
        text = "\n".join(getattr(c, "text", "") for c in result.content or [])
        if result.is_error:
            return None, ToolError("invalid_value", text or f"{name} failed").to_json()
        if result.structured_content is not None:
            return json.loads(canonical_json(result.structured_content)), None
        try:
            return json.loads(text), None
        except ValueError:
            return text, None

    def ensure(self, calls: tuple[tuple[str, str], ...]) -> None:
        """Step 2: bring the server to the state ``calls`` leave (reset, then replay)."""
        with self.lock:
            if self.current == calls:
                return
            done: tuple[tuple[str, str], ...] = ()
            if self.current is not None and calls[: len(self.current)] == self.current:
                done = self.current  # the episode went on from what the server holds
            else:
                self._rewind()
            for name, args in calls[len(done) :]:
                _, error = self.call(name, json.loads(args))
                if error is not None:
                    log.warning("MCP replay of %s(%s) failed: %s", name, args, error["message"])
            self.current = calls

    def _rewind(self) -> None:
        cfg = self.config
        if cfg.reset_tool and any(t.name == cfg.reset_tool for t in self.tools()):
            _, error = self.call(cfg.reset_tool, {})
            if error is None:
                return
            raise ConfigError(f"the MCP server's {cfg.reset_tool} failed: {error['message']}")
        if cfg.url:
            raise ConfigError(
                f"the MCP server at {cfg.url} has no reset tool {cfg.reset_tool!r}",
                hint="episodes start from the initial state: give `reset_tool`",
            )
        self.close()  # stdio: a fresh process is the initial state

    def state(self, calls: tuple[tuple[str, str], ...]) -> Any:
        """The ``state_tool``'s answer after ``calls`` (None: the server has none)."""
        cfg = self.config
        if not cfg.state_tool or not any(t.name == cfg.state_tool for t in self.tools()):
            return None
        with self.lock:
            if calls not in self._states:
                self.ensure(calls)
                output, error = self.call(cfg.state_tool, {})
                self._states[calls] = output if error is None else None
            return self._states[calls]

    def toolset(self, name: str) -> Toolset:
        """The server's tools as a toolset, less the harness's reset and state tools."""
        hidden = {self.config.reset_tool, self.config.state_tool}
        specs = []
        for t in self.tools():
            if t.name in hidden:
                continue
            params = {k: v for k, v in dict(t.input_schema).items() if k != "title"}
            params.setdefault("type", "object")
            response = t.output_schema
            specs.append(
                ToolSpec(
                    name=t.name,
                    description=t.description or "",
                    parameters=params,
                    response={k: v for k, v in response.items() if k != "title"}
                    if response
                    else None,
                    source=self.config.url or " ".join(self.config.argv()),
                    extra={"read_only": bool(t.annotations and t.annotations.read_only_hint)},
                )
            )
        return Toolset(name=name, tools=specs, format="mcp")


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
        self.calls: tuple[tuple[str, str], ...] = ()

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
            if error is None and not spec.extra.get("read_only"):
                self.calls = (*self.calls, (spec.name, canonical_json(args)))
            self.server.current = self.calls
        if error is not None:
            return ToolResult(call.id, call.name, args, error=error)
        return ToolResult(call.id, call.name, args, output=output)

    def _snapshot_state(self) -> tuple[tuple[str, str], ...]:
        return self.calls

    def _restore_state(self, state: tuple[tuple[str, str], ...]) -> None:
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
        def tables(calls: tuple[tuple[str, str], ...]) -> State:
            found = self.server.state(calls)
            if not isinstance(found, dict):
                found = {"calls": {str(i): [n, a] for i, (n, a) in enumerate(calls)}}
            return State({k: v if isinstance(v, dict) else {"value": v}
                          for k, v in found.items()})  # fmt: skip

        return diff(tables(a.state), tables(self.calls if b is None else b.state))
