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
          shop: {file: tools/shop.json, code: ["mypkg.pay:Payments"], tools: {pay: code}}
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
   MCP server in ``mcp``) or ``replay``; recorded too under ``recording: record``. Where a
   toolset mixes backends, ``tools`` maps a tool to the backend that runs it (``backend``
   runs the rest): a :class:`~trajsynth.envs.mixed.MixedEnvironment` routes each call to its
   part (a tool named there that no backend has, or a backend without its settings, is a
   ConfigError); when every tool shares one backend, the single environment above is built;
3) with ``recording: replay``, a :class:`~trajsynth.envs.recording.ReplayEnvironment` over
   the loaded records, for every domain.

The factory is cheap to build (nothing starts until used: the sandbox and the records load
lazily) and safe to share between threads. The simulator's answers are cached per factory by
(seed, state hash, call), so a replay gets identical answers. ``close()`` saves new records
and stops the sandbox.
"""

from __future__ import annotations

import importlib
import threading
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from ..core.config import StrictModel
from ..core.errors import ConfigError
from .base import Environment
from .domain import Domain
from .domains import BUILTIN_DOMAINS, example_tasks, get_domain
from .http import HTTPConfig, HTTPEnvironment, HTTPProxy
from .mcp import MCPConfig, MCPEnvironment, MCPServer
from .recording import Recorder, RecordingEnvironment, ReplayEnvironment
from .sandbox import Sandbox, SandboxConfig
from .simulated import AnswerCache, Answerer, SimulatedEnvironment, with_responses
from .spec import Toolset, ToolSpec
from .tasks import ExampleTask

__all__ = ["EnvConfig", "EnvFactory", "ToolsetConfig"]


class ToolsetConfig(StrictModel):
    """One imported toolset: its specs and what executes them."""

    file: str | None = Field(
        default=None,
        description="Toolset file (a toolset.json or an OpenAI tools JSON list); for `code`, "
        "optional (the methods' signatures give the specs).",
    )
    format: str | None = Field(
        default=None,
        description="Import `file` (a file or folder) from this format on load instead of "
        "reading a toolset file: openai, bfcl, tau, toolalpaca, stabletoolbench, apibank "
        "(`trajsynth tools import` does the same once, to a file).",
    )
    exclude: list[str] = Field(
        default_factory=list,
        description="Tool names left out of the toolset (e.g. names a benchmark uses).",
    )
    backend: Literal["simulated", "code", "mcp", "replay", "http"] = Field(
        default="simulated",
        description="simulated: a stateful simulator answers in each tool's output schema; "
        "code: the Python classes in `code` run the calls; mcp: the MCP server in `mcp` "
        "runs them; replay: recorded results only; http: the OpenAPI operations in `file` are "
        "called over HTTP through the allowlist and record/replay cache of `http`.",
    )
    code: list[str] = Field(
        default_factory=list,
        description="For `code`: import paths of the implementing classes ('pkg.mod:Class') "
        "or modules ('pkg.mod').",
    )
    mcp: MCPConfig | None = Field(
        default=None, description="For `mcp`: the server ({command} for stdio, or {url})."
    )
    http: HTTPConfig | None = Field(
        default=None,
        description="For `http`: the allowed hosts, the record/replay cache and its mode.",
    )
    tools: dict[str, Literal["simulated", "code", "mcp"]] = Field(
        default_factory=dict,
        description="Per-tool backends where a toolset mixes them: tool name → backend; "
        "`backend` runs the rest.",
    )

    def load_specs(self) -> Toolset | None:
        """The specs of `file` (imported when `format` is set); None without a file."""
        if not self.file:
            return None
        if self.format:
            from .importers import import_tools

            return import_tools(self.file, self.format)
        return Toolset.load(Path(self.file))

    def backends(self) -> list[str]:
        """Every backend this toolset uses, the default first."""
        return [self.backend, *sorted(set(self.tools.values()) - {self.backend})]

    @property
    def mixed(self) -> bool:
        return len(self.backends()) > 1

    @model_validator(mode="after")
    def _check(self) -> ToolsetConfig:
        if self.backend == "replay" and self.mixed:
            raise ValueError("backend 'replay' cannot be mixed with per-tool `tools` backends")
        for backend in self.backends():
            who = f"backend {backend!r}" if backend == self.backend else (
                f"tools {sorted(t for t, b in self.tools.items() if b == backend)} use "
                f"backend {backend!r}, which"
            )  # fmt: skip
            if backend == "code" and not self.code:
                raise ValueError(f"{who} needs `code`: the implementing classes")
            if backend == "mcp" and self.mcp is None:
                raise ValueError(f"{who} needs `mcp`: {{command: ...}} or {{url: ...}}")
            if backend == "http" and (self.http is None or not self.file):
                raise ValueError(f"{who} needs `file` (OpenAPI tool specs) and `http` settings")
            if backend in ("simulated", "replay") and not self.file:
                raise ValueError(f"{who} needs `file`: the tool specs")
        return self


class EnvConfig(StrictModel):
    """The ``env`` section of a pipeline's defaults."""

    domains: list[str] | None = Field(
        default=None, description="Built-in domains to offer (default: every one)."
    )
    toolsets: dict[str, str | ToolsetConfig] = Field(
        default_factory=dict,
        description="Extra domains: name → a toolset file (run by the simulator) or "
        "{file, backend: simulated | code | mcp | replay, code: [import paths], mcp: {...}, "
        "tools: {tool: backend}}.",
    )
    search: dict[str, str] = Field(
        default_factory=dict,
        description="Search domains: name → a folder (or file) of documents (.txt, .md, or "
        "JSONL of {id, title, text}) searched with BM25 by the tools search and "
        "open_document (trajsynth.envs.search).",
    )
    python_exec: bool = Field(
        default=False, description="Offer the sandboxed python_exec tool in built-in domains."
    )
    decontaminate: Literal["bfcl"] | None = Field(
        default=None,
        description="Leave out of every domain the tools whose names a benchmark's test "
        "functions use (bfcl: every BFCL single-turn function, from the bfcl-eval wheel), "
        "so no task offers or calls one.",
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


def _without(ts: Toolset, names: list[str]) -> Toolset:
    """``ts`` less the tools ``names`` (names it does not have are ignored)."""
    drop = set(names)
    return ts.subset([n for n in ts.names() if n not in drop]) if drop else ts


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
        clash = set(self.config.search) & (set(BUILTIN_DOMAINS) | set(self.config.toolsets))
        if clash:
            raise ConfigError(f"search domains {sorted(clash)} clash with other domain names")
        if self.config.recording == "replay" and not self.config.records:
            raise ConfigError("recording: replay needs `records` (a recorded results file)")
        self._lock = threading.Lock()
        self._sandbox: Sandbox | None = None
        self._recorder: Recorder | None = None
        self._toolsets: dict[str, Toolset] = {}
        self._owners: dict[str, dict[str, str]] = {}
        self._python_exec: Any = None
        self._excluded: frozenset[str] | None = None
        #: the simulator's answering model (the ``tool`` LLM role), and its answers
        self.answer = answer
        self.answers = AnswerCache()
        self._mcp: dict[str, MCPServer] = {}
        self._mcp_lock = threading.Lock()
        self._versions: dict[str, str] = {}
        self._http: dict[str, HTTPProxy] = {}
        self._search: dict[str, Domain] = {}

    def toolset_config(self, domain: str) -> ToolsetConfig:
        """How an imported toolset is executed (a bare path: simulated)."""
        raw = self.config.toolsets[domain]
        return ToolsetConfig(file=raw) if isinstance(raw, str) else raw

    # -- versions -------------------------------------------------------------------------
    def version(self, domain: str) -> str:
        """The version of ``domain``'s environment: a hash of its tool specs (as offered),
        the source files of the code that runs them (a built-in domain's module, a `code`
        toolset's modules, an MCP server's command and the script it names), and their data
        (the toolset file, the recorded results). A row played in another version may no
        longer hold (``trajsynth expire``)."""
        with self._lock:
            known = self._versions.get(domain)
        if known is not None:
            return known
        import inspect
        import shlex

        from ..core.ids import file_fingerprint, stable_hash

        parts: dict[str, Any] = {"tools": self.toolset(domain).model_dump(mode="json")}
        files: list[str] = []
        if domain in self.config.toolsets:
            tc = self.toolset_config(domain)
            # how calls are cached or replayed is not what they do: not part of the version
            parts["config"] = tc.model_dump(
                mode="json", exclude={"file": True, "http": {"mode", "cache", "timeout_s"}}
            )
            for target in tc.code:
                module = importlib.import_module(target.split(":", 1)[0])
                files.append(inspect.getsourcefile(module) or "")
            command = tc.mcp.command if tc.mcp is not None else None
            if command:
                words = command if isinstance(command, list) else shlex.split(command)
                files += [w for w in words if Path(w).is_file()]
            if tc.file:
                files.append(tc.file)
        else:  # a built-in domain: the modules of its state builder and its tools
            d = self._domain(domain)
            if domain in self.config.search:  # and the documents it searches
                from .search import collection_version

                parts["collection"] = collection_version(self.config.search[domain])
            fns = [d.build_state, *(t.fn for t in d.tools)]
            files += sorted({inspect.getsourcefile(f) or "" for f in fns if inspect.isfunction(f)})
        if self.config.records:
            files.append(str(self.config.records))
        parts["files"] = [
            (Path(f).name, file_fingerprint(f) if Path(f).is_file() else None) for f in files if f
        ]
        version = stable_hash(parts)[:16]
        with self._lock:
            self._versions[domain] = version
        return version

    # -- what is offered ----------------------------------------------------------------
    def domains(self) -> list[str]:
        """Every domain name ``make`` accepts."""
        builtin = self.config.domains if self.config.domains is not None else list(BUILTIN_DOMAINS)
        return [*builtin, *self.config.toolsets, *self.config.search]

    def _check(self, domain: str) -> None:
        if domain not in self.domains():
            raise ConfigError(
                f"unknown domain {domain!r}", hint=f"available: {', '.join(self.domains())}"
            )

    def toolset(self, domain: str) -> Toolset:
        """The tools offered in ``domain`` (``Toolset.to_openai()`` is the ``tools`` column)."""
        self._check(domain)
        if domain in self.config.toolsets:
            benchmark = sorted(self._benchmark_names())
            with self._lock:
                if domain not in self._toolsets:
                    tc = self.toolset_config(domain)
                    if tc.tools:
                        mixed, self._owners[domain] = self._mixed(domain, tc)
                        drop = [*tc.exclude, *benchmark]
                        self._toolsets[domain] = _without(mixed, drop)
                        return self._toolsets[domain]
                    ts = tc.load_specs()
                    if tc.backend == "code":
                        from .code import toolset_from_targets

                        ts = toolset_from_targets(tc.code, name=domain, specs=ts)
                    if tc.backend == "mcp":
                        ts = self.mcp_server(domain).toolset(domain)
                    assert ts is not None
                    if tc.backend == "simulated":
                        ts = with_responses(ts)
                    ts = _without(ts, [*tc.exclude, *benchmark])
                    self._toolsets[domain] = ts.model_copy(update={"name": domain})
            return self._toolsets[domain]
        ts = _without(self._domain(domain).toolset(), sorted(self._benchmark_names()))
        if self.config.python_exec:
            ts = ts.merged(Toolset(tools=[self._python_exec_tool().spec]))
        return ts

    def _domain(self, domain: str) -> Domain:
        """A built-in domain, or a search domain over its documents (built once)."""
        if domain not in self.config.search:
            return get_domain(domain)
        with self._lock:
            found = self._search.get(domain)
        if found is None:
            from .search import search_domain

            found = search_domain(domain, self.config.search[domain])
            with self._lock:
                found = self._search.setdefault(domain, found)
        return found

    def _benchmark_names(self) -> frozenset[str]:
        """The tool names ``decontaminate`` leaves out (read once)."""
        if self.config.decontaminate is None:
            return frozenset()
        if self._excluded is None:  # a race reads the same names twice, harmlessly
            from .importers.bfcl import single_turn_index

            self._excluded = single_turn_index().names
        return self._excluded

    def _part(self, domain: str, tc: ToolsetConfig, backend: str, specs: Toolset | None) -> Toolset:
        """Every tool one backend of a mixed toolset could run."""
        if backend == "code":
            from .code import toolset_from_targets

            return toolset_from_targets(tc.code, name=domain)
        if backend == "mcp":
            return self.mcp_server(domain).toolset(domain)
        assert specs is not None
        return specs

    def _mixed(self, domain: str, tc: ToolsetConfig) -> tuple[Toolset, dict[str, str]]:
        """The tools of a toolset with per-tool backends, and each one's backend: the file's
        tools (else the default backend's) plus the tools named in ``tools``; a tool's spec
        comes from the file when it has one, else from the backend that runs it."""
        specs = tc.load_specs()
        parts = {b: self._part(domain, tc, b, specs) for b in tc.backends()}
        base = specs if specs is not None else parts[tc.backend]
        unknown = [t for t in tc.tools if t not in base.names() and all(
            t not in p.names() for p in parts.values())]  # fmt: skip
        if unknown:
            raise ConfigError(
                f"toolset {domain!r}: `tools` names unknown tools {unknown}",
                hint=f"its tools: {', '.join(base.names())}",
            )
        names = [*base.names(), *(t for t in tc.tools if t not in base.names())]
        owners: dict[str, str] = {t: tc.tools.get(t, tc.backend) for t in names}
        missing = [f"{t} ({b})" for t, b in owners.items() if t not in parts[b].names()]
        if missing:
            raise ConfigError(
                f"toolset {domain!r}: no implementation for {', '.join(missing)}",
                hint="name the tool in `tools` with a backend that has it, or fix `code`/`mcp`",
            )
        chosen: dict[str, ToolSpec] = {}
        for t, b in owners.items():
            spec = specs.get(t) if specs is not None else None
            chosen[t] = spec if spec is not None else parts[b][t]
        sim = [t for t, b in owners.items() if b == "simulated"]
        if sim:  # the simulated tools get their output schemas, as a simulated toolset does
            answered = with_responses(Toolset(name=domain, tools=[chosen[t] for t in sim]))
            chosen.update({t.name: t for t in answered})
        return Toolset(name=domain, tools=[chosen[t] for t in names]), owners

    def owners(self, domain: str) -> dict[str, str]:
        """Tool → backend for a toolset with per-tool backends (empty for any other)."""
        self.toolset(domain)
        return self._owners.get(domain, {})

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

    def http_proxy(self, domain: str) -> HTTPProxy:
        """The allowlist and cache every call of an ``http`` toolset goes through (one per
        toolset per process; its server checked against the allowlist first)."""
        with self._lock:
            proxy = self._http.get(domain)
        if proxy is None:
            config = self.toolset_config(domain).http
            assert config is not None
            config.check(self.toolset(domain), domain)
            with self._lock:
                proxy = self._http.setdefault(domain, HTTPProxy(config))
        return proxy

    def mcp_server(self, domain: str) -> MCPServer:
        """The connection to a toolset's MCP server (made on first use, shared)."""
        with self._mcp_lock:
            if domain not in self._mcp:
                config = self.toolset_config(domain).mcp
                assert config is not None
                self._mcp[domain] = MCPServer(config, domain)
            return self._mcp[domain]

    # -- environments -----------------------------------------------------------------------
    def make(
        self, domain: str, *, seed: int = 0, initial_state: dict[str, Any] | None = None
    ) -> Environment:
        """A fresh environment for ``domain`` in the state of ``seed`` (+ ``initial_state``)."""
        self._check(domain)
        cfg = self.config
        common: dict[str, Any] = {
            "max_steps": cfg.max_steps,
            "max_observation_chars": cfg.max_observation_chars,
        }
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
        if backend is not None and len(set(self.owners(domain).values())) > 1:
            env = self._make_mixed(domain, seed=seed, initial_state=initial_state)
            return RecordingEnvironment(env, self.recorder) if cfg.recording == "record" else env
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
        if backend == "http":
            env = HTTPEnvironment(
                domain,
                self.http_proxy(domain),
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
        env = self._domain(domain).make(
            seed=seed,
            initial_state=initial_state,
            extra_tools=extra,
            validate_arguments=cfg.validate_arguments,
            **common,
        )
        if cfg.recording == "record":
            env = RecordingEnvironment(env, self.recorder)
        return env

    def _make_mixed(
        self, domain: str, *, seed: int, initial_state: dict[str, Any] | None
    ) -> Environment:
        from .code import CodeEnvironment
        from .mixed import MixedEnvironment

        cfg, tc, owners = self.config, self.toolset_config(domain), self.owners(domain)
        common: dict[str, Any] = {
            "max_steps": cfg.max_steps,
            "max_observation_chars": cfg.max_observation_chars,
        }
        full = self.toolset(domain)
        parts: dict[str, Environment] = {}
        for b in sorted(set(owners.values())):
            ts = Toolset(name=domain, tools=[t for t in full if owners[t.name] == b])
            kw: dict[str, Any] = {
                "seed": seed,
                "validate_arguments": cfg.validate_arguments,
                **common,
            }
            if b == "simulated":
                parts[b] = SimulatedEnvironment(
                    domain, ts, answer=self.answer, cache=self.answers, **kw
                )
            elif b == "code":
                parts[b] = CodeEnvironment(domain, tc.code, ts, **kw)
            else:
                parts[b] = MCPEnvironment(domain, self.mcp_server(domain), ts, **kw)
        return MixedEnvironment(
            domain, full, parts, owners, default=tc.backend, initial_state=initial_state, **common
        )

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
