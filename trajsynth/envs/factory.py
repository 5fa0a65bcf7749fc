"""``EnvFactory``: what a stage gets as ``ctx.envs``: domains, their tools, fresh environments.

Built from the pipeline's ``defaults.env`` mapping, validated as :class:`EnvConfig`::

    defaults:
      env:
        domains: [travel, commerce]        # built-in domains offered (default: all)
        toolsets:                          # imported toolsets, each a domain
          bfcl_fs: tools/fs.json           # a spec file: run by the simulator
          shop: {file: tools/shop.json, backend: replay}
          fs: {backend: code, code: ["mypkg.fs:FileSystem"]}  # classes run the calls
          notes: {backend: mcp, mcp: {command: "python notes_server.py"}}  # or {url: ...}
        python_exec: true                  # add the sandboxed python_exec tool everywhere
        sandbox: {kind: auto, pool_size: 2, limits: {memory_mb: 256}}
        recording: record                  # off | record | replay
        records: runs/tool_records.jsonl
        max_steps: 32

``make(domain, seed=, initial_state=)`` returns:

1) for a built-in domain, a :class:`~trajsynth.envs.domain.DomainEnvironment` (plus
   ``python_exec`` when enabled), wrapped in a
   :class:`~trajsynth.envs.recording.RecordingEnvironment` when ``recording: record``;
2) for an imported toolset, the environment of its ``backend``: ``simulated`` (the default:
   :class:`~trajsynth.envs.simulated.SimulatedEnvironment`, a stateful simulator answering in
   each tool's output schema), ``code`` (:class:`~trajsynth.envs.code.CodeEnvironment`, the
   classes named in ``code``), ``mcp`` (:class:`~trajsynth.envs.mcp.MCPEnvironment`, the
   MCP server in ``mcp``) or ``replay``; recorded too under ``recording: record``;
3) with ``recording: replay``, a :class:`~trajsynth.envs.recording.ReplayEnvironment` over
   the loaded records, for every domain.

The factory is cheap to build (nothing starts until used: the sandbox and the records load
lazily) and safe to share between threads. The simulator's answers are cached per factory by
(seed, state hash, call), so a replay gets identical answers. ``close()`` saves new records
and stops the sandbox.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from ..core.config import StrictModel
from ..core.errors import ConfigError
from .base import Environment
from .domains import BUILTIN_DOMAINS, example_tasks, get_domain
from .mcp import MCPConfig, MCPEnvironment, MCPServer
from .recording import Recorder, RecordingEnvironment, ReplayEnvironment
from .sandbox import Sandbox, SandboxConfig
from .simulated import AnswerCache, Answerer, SimulatedEnvironment, with_responses
from .spec import Toolset
from .tasks import ExampleTask

__all__ = ["EnvConfig", "EnvFactory", "ToolsetConfig"]


class ToolsetConfig(StrictModel):
    """One imported toolset: its specs and what executes them."""

    file: str | None = Field(
        default=None,
        description="Toolset file (a toolset.json or an OpenAI tools JSON list); for `code`, "
        "optional (the methods' signatures give the specs).",
    )
    backend: Literal["simulated", "code", "mcp", "replay"] = Field(
        default="simulated",
        description="simulated: a stateful simulator answers in each tool's output schema; "
        "code: the Python classes in `code` run the calls; mcp: the MCP server in `mcp` "
        "runs them; replay: recorded results only.",
    )
    code: list[str] = Field(
        default_factory=list,
        description="For `code`: import paths of the implementing classes ('pkg.mod:Class') "
        "or modules ('pkg.mod').",
    )
    mcp: MCPConfig | None = Field(
        default=None, description="For `mcp`: the server ({command} for stdio, or {url})."
    )

    @model_validator(mode="after")
    def _check(self) -> ToolsetConfig:
        if self.backend == "code" and not self.code:
            raise ValueError("backend 'code' needs `code`: the implementing classes")
        if self.backend == "mcp" and self.mcp is None:
            raise ValueError("backend 'mcp' needs `mcp`: {command: ...} or {url: ...}")
        if self.backend in ("simulated", "replay") and not self.file:
            raise ValueError(f"backend {self.backend!r} needs `file`: the tool specs")
        return self


class EnvConfig(StrictModel):
    """The ``env`` section of a pipeline's defaults."""

    domains: list[str] | None = Field(
        default=None, description="Built-in domains to offer (default: every one)."
    )
    toolsets: dict[str, str | ToolsetConfig] = Field(
        default_factory=dict,
        description="Extra domains: name → a toolset file (run by the simulator) or "
        "{file, backend: simulated | code | replay, code: [import paths]}.",
    )
    python_exec: bool = Field(
        default=False, description="Offer the sandboxed python_exec tool in built-in domains."
    )
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    recording: Literal["off", "record", "replay"] = Field(
        default="off",
        description="record: save every tool result to `records`; replay: answer calls from "
        "`records` instead of running tools.",
    )
    records: str | None = Field(
        default=None, description="JSON Lines file of recorded tool results."
    )
    max_steps: int = Field(default=64, ge=1, description="Steps before an episode is cut off.")
    max_observation_chars: int | None = Field(
        default=16_000, ge=100, description="Longest tool output shown to the model."
    )
    validate_arguments: bool = Field(
        default=True, description="Check arguments against the tool's schema before running."
    )


class EnvFactory:
    """Domains, toolsets and fresh environments for stages (see the module docstring)."""

    def __init__(
        self, config: EnvConfig | dict[str, Any] | None = None, *, answer: Answerer | None = None
    ) -> None:
        try:
            self.config = (
                config if isinstance(config, EnvConfig) else EnvConfig.model_validate(config or {})
            )
        except ValidationError as exc:
            errors = exc.errors()  # a toolset is a path or a mapping: report the mapping's
            err = next((e for e in errors if "str" not in e["loc"]), errors[0])
            where = ".".join(str(p) for p in err["loc"] if "ToolsetConfig" not in str(p))
            raise ConfigError(f"invalid env config at {where or 'env'}: {err['msg']}") from exc
        for name in self.config.domains or []:
            get_domain(name)
        clash = set(self.config.toolsets) & set(BUILTIN_DOMAINS)
        if clash:
            raise ConfigError(f"toolsets {sorted(clash)} clash with built-in domain names")
        if self.config.recording == "replay" and not self.config.records:
            raise ConfigError("recording: replay needs `records` (a recorded results file)")
        self._lock = threading.Lock()
        self._sandbox: Sandbox | None = None
        self._recorder: Recorder | None = None
        self._toolsets: dict[str, Toolset] = {}
        self._python_exec: Any = None
        #: the simulator's answering model (the ``tool`` LLM role), and its answers
        self.answer = answer
        self.answers = AnswerCache()
        self._mcp: dict[str, MCPServer] = {}
        self._mcp_lock = threading.Lock()

    def toolset_config(self, domain: str) -> ToolsetConfig:
        """How an imported toolset is executed (a bare path: simulated)."""
        raw = self.config.toolsets[domain]
        return ToolsetConfig(file=raw) if isinstance(raw, str) else raw

    # -- what is offered ----------------------------------------------------------------
    def domains(self) -> list[str]:
        """Every domain name ``make`` accepts."""
        builtin = self.config.domains if self.config.domains is not None else list(BUILTIN_DOMAINS)
        return [*builtin, *self.config.toolsets]

    def _check(self, domain: str) -> None:
        if domain not in self.domains():
            raise ConfigError(
                f"unknown domain {domain!r}", hint=f"available: {', '.join(self.domains())}"
            )

    def toolset(self, domain: str) -> Toolset:
        """The tools offered in ``domain`` (``Toolset.to_openai()`` is the ``tools`` column)."""
        self._check(domain)
        if domain in self.config.toolsets:
            with self._lock:
                if domain not in self._toolsets:
                    tc = self.toolset_config(domain)
                    ts = Toolset.load(Path(tc.file)) if tc.file else None
                    if tc.backend == "code":
                        from .code import toolset_from_targets

                        ts = toolset_from_targets(tc.code, name=domain, specs=ts)
                    if tc.backend == "mcp":
                        ts = self.mcp_server(domain).toolset(domain)
                    assert ts is not None
                    if tc.backend == "simulated":
                        ts = with_responses(ts)
                    self._toolsets[domain] = ts.model_copy(update={"name": domain})
            return self._toolsets[domain]
        ts = get_domain(domain).toolset()
        if self.config.python_exec:
            ts = ts.merged(Toolset(tools=[self._python_exec_tool().spec]))
        return ts

    def example_tasks(self, domain: str | None = None) -> list[ExampleTask]:
        """The hand-written example tasks of one built-in domain (or of all offered ones)."""
        if domain is not None:
            self._check(domain)
            return example_tasks(domain)
        return [t for d in self.domains() if d in BUILTIN_DOMAINS for t in example_tasks(d)]

    # -- services -------------------------------------------------------------------------
    @property
    def sandbox(self) -> Sandbox:
        """The shared sandbox (started on first use)."""
        with self._lock:
            if self._sandbox is None:
                self._sandbox = Sandbox(self.config.sandbox)
            return self._sandbox

    @property
    def recorder(self) -> Recorder:
        with self._lock:
            if self._recorder is None:
                self._recorder = Recorder(self.config.records)
            return self._recorder

    def _python_exec_tool(self) -> Any:
        if self._python_exec is None:
            from .python_exec import make_python_exec

            self._python_exec = make_python_exec(self.sandbox)
        return self._python_exec

    def mcp_server(self, domain: str) -> MCPServer:
        """The connection to a toolset's MCP server (made on first use, shared)."""
        with self._mcp_lock:
            if domain not in self._mcp:
                config = self.toolset_config(domain).mcp
                assert config is not None
                self._mcp[domain] = MCPServer(config)
            return self._mcp[domain]

    # -- environments -----------------------------------------------------------------------
    def make(
        self, domain: str, *, seed: int = 0, initial_state: dict[str, Any] | None = None
    ) -> Environment:
        """A fresh environment for ``domain`` in the state of ``seed`` (+ ``initial_state``)."""
        self._check(domain)
        cfg = self.config
        common = {"max_steps": cfg.max_steps, "max_observation_chars": cfg.max_observation_chars}
        backend = self.toolset_config(domain).backend if domain in cfg.toolsets else None
        if cfg.recording == "replay" or backend == "replay":
            return ReplayEnvironment(
                domain,
                self.toolset(domain),
                self.recorder,
                seed=seed,
                initial_state=initial_state,
                **common,
            )
        env: Environment
        if backend == "simulated":
            env = SimulatedEnvironment(
                domain,
                self.toolset(domain),
                seed=seed,
                initial_state=initial_state,
                answer=self.answer,
                cache=self.answers,
                validate_arguments=cfg.validate_arguments,
                **common,
            )
            return RecordingEnvironment(env, self.recorder) if cfg.recording == "record" else env
        if backend == "code":
            from .code import CodeEnvironment

            env = CodeEnvironment(
                domain,
                self.toolset_config(domain).code,
                self.toolset(domain),
                seed=seed,
                initial_state=initial_state,
                validate_arguments=cfg.validate_arguments,
                **common,
            )
            return RecordingEnvironment(env, self.recorder) if cfg.recording == "record" else env
        if backend == "mcp":
            env = MCPEnvironment(
                domain,
                self.mcp_server(domain),
                self.toolset(domain),
                seed=seed,
                initial_state=initial_state,
                validate_arguments=cfg.validate_arguments,
                **common,
            )
            return RecordingEnvironment(env, self.recorder) if cfg.recording == "record" else env
        extra = [self._python_exec_tool()] if cfg.python_exec else None
        env = get_domain(domain).make(
            seed=seed,
            initial_state=initial_state,
            extra_tools=extra,
            validate_arguments=cfg.validate_arguments,
            **common,
        )
        if cfg.recording == "record":
            env = RecordingEnvironment(env, self.recorder)
        return env

    def flush(self) -> None:
        """Save the records made so far (recording: record)."""
        if self._recorder is not None and self.config.recording == "record":
            self._recorder.save()

    def close(self) -> None:
        self.flush()
        with self._mcp_lock:
            for server in self._mcp.values():
                server.close()
            self._mcp.clear()
        with self._lock:
            if self._sandbox is not None:
                self._sandbox.close()
                self._sandbox = None
