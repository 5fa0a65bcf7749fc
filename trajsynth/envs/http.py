"""Tools that are HTTP APIs (OpenAPI operations, e.g. ToolAlpaca's toolsets), called through a
filtering, caching proxy.

A toolset imported from OpenAPI keeps each operation's method, path and server URL in its
specs' ``extra`` (:mod:`trajsynth.envs.importers.toolalpaca`). With ``backend: http`` a call
becomes that request — path parameters filled in, the others as the query string (GET,
DELETE, HEAD) or a JSON body — sent by :class:`HTTPProxy`, which

- lets a request through only to a host on the ``allow`` list (``host`` or ``host:port``):
  any other is refused before anything is sent, and the call returns a ``forbidden_host``
  error naming the host (the server URL of the toolset itself must be allowed, or the
  toolset is a configuration error);
- keeps a record/replay cache (``cache``: a JSONL file of exchanges, keyed by method, URL,
  query and body): ``mode: record`` answers from the cache and sends (and records) only what
  it lacks; ``mode: replay`` answers from the cache alone, so a rerun replays exactly and
  offline, and a request it lacks is a ``not_recorded`` error; ``mode: live`` sends every
  request and keeps nothing.

An HTTP API's state is not ours to snapshot: the environment's state is the calls made (as
an MCP server's is), so snapshots, hashes and diffs follow the calls.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote, urlsplit

from pydantic import Field

from ..core.config import StrictModel
from ..core.errors import ConfigError
from ..core.ids import canonical_json, stable_hash
from ..core.schema import ToolCall
from ..core.task import GroundTruth
from .base import Environment, EnvSnapshot, ToolResult
from .calls import read_arguments
from .spec import Toolset
from .state import State, StateDiff, diff

__all__ = ["HTTPConfig", "HTTPEnvironment", "HTTPProxy"]


class HTTPConfig(StrictModel):
    """How the calls of an HTTP toolset are sent."""

    allow: list[str] = Field(
        default_factory=list,
        description="Hosts (host or host:port) requests may reach; every other is refused.",
    )
    base_url: str | None = Field(
        None,
        description="Send to this server instead of the one in the specs (a local stand-in, "
        "a staging server).",
    )
    cache: str | None = Field(None, description="Record/replay cache: a JSONL file.")
    mode: Literal["record", "replay", "live"] = Field(
        "record",
        description="record: answer from the cache, send and record what it lacks; replay: "
        "the cache alone (offline, exact reruns); live: send everything, keep nothing.",
    )
    timeout_s: float = Field(20.0, gt=0, description="Seconds per request.")

    def check(self, toolset: Toolset, domain: str) -> None:
        """A toolset whose server is not allowed, or a cache-less replay, cannot run."""
        if self.mode != "live" and not self.cache:
            raise ConfigError(f"toolset {domain!r}: http mode {self.mode!r} needs `cache`")
        for spec in toolset.tools:
            server = self.base_url or spec.extra.get("server") or ""
            host = urlsplit(server).netloc
            if host and not _allowed(host, self.allow):
                raise ConfigError(
                    f"toolset {domain!r}: tool {spec.name!r} calls {host}, which is not in "
                    f"http.allow {self.allow}",
                    hint="add the host to `http.allow`, or point `http.base_url` elsewhere",
                )


def _allowed(host: str, allow: list[str]) -> bool:
    name = host.rsplit("@", 1)[-1].lower()
    bare = name.split(":", 1)[0]
    return any(a.lower() in (name, bare) for a in allow)


class HTTPProxy:
    """The allowlist and the record/replay cache in front of every request (see the module
    docstring). Thread-safe; one per toolset per process."""

    def __init__(self, config: HTTPConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._cache: dict[str, dict[str, Any]] = {}
        self.sent = 0
        if config.cache and Path(config.cache).is_file():
            for line in Path(config.cache).read_text(encoding="utf-8").splitlines():
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue  # a torn last line of a killed run
                if isinstance(entry, dict) and isinstance(entry.get("key"), str):
                    self._cache[entry["key"]] = entry

    @staticmethod
    def key(method: str, url: str, query: Mapping[str, Any], body: Any) -> str:
        return stable_hash({"m": method, "u": url, "q": dict(sorted(query.items())), "b": body})

    def request(
        self, method: str, url: str, query: Mapping[str, Any], body: Any
    ) -> tuple[int, str] | dict[str, Any]:
        """``(status, text)``, or an error dict (``forbidden_host``, ``not_recorded``,
        ``unreachable``) when nothing came back."""
        host = urlsplit(url).netloc
        if not _allowed(host, self.config.allow):
            return {
                "type": "forbidden_host",
                "message": f"{host} is not in the allowlist {self.config.allow}; not sent",
            }
        k = self.key(method, url, query, body)
        if self.config.mode != "live":
            with self._lock:
                hit = self._cache.get(k)
            if hit is not None:
                return int(hit["status"]), str(hit["text"])
            if self.config.mode == "replay":
                return {
                    "type": "not_recorded",
                    "message": f"{method} {url} is not in the replay cache {self.config.cache}",
                }
        import httpx

        try:
            response = httpx.request(
                method,
                url,
                params={k2: _text(v) for k2, v in query.items()},
                json=body,
                timeout=self.config.timeout_s,
                follow_redirects=False,
            )
        except httpx.HTTPError as exc:
            return {"type": "unreachable", "message": f"{method} {url}: {exc}"}
        with self._lock:
            self.sent += 1
        status, text = response.status_code, response.text
        if self.config.mode == "record" and self.config.cache:
            entry = {"key": k, "method": method, "url": url, "query": dict(query), "body": body,
                     "status": status, "text": text}  # fmt: skip
            with self._lock:
                self._cache[k] = entry
                path = Path(self.config.cache)
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(path, "a", encoding="utf-8") as f:
                    f.write(json.dumps(entry, ensure_ascii=False) + "\n")
        return status, text


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


class HTTPEnvironment(Environment):
    """An episode against HTTP tools through an :class:`HTTPProxy` (see the module docstring)."""

    def __init__(
        self,
        domain: str,
        proxy: HTTPProxy,
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
        self.proxy = proxy
        self.toolset = toolset
        self.seed = seed
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
        method = str(spec.extra.get("method") or "GET").upper()
        path = str(spec.extra.get("path") or "")
        server = (self.proxy.config.base_url or spec.extra.get("server") or "").rstrip("/")
        rest = dict(args)
        for name in list(rest):
            if "{" + name + "}" in path:
                path = path.replace("{" + name + "}", quote(_text(rest.pop(name)), safe=""))
        if method in ("GET", "DELETE", "HEAD"):
            query, body = rest, None
        else:
            query, body = {}, rest
        answer = self.proxy.request(method, server + path, query, body)
        if isinstance(answer, dict):
            return ToolResult(call.id, call.name, args, error=answer)
        status, text = answer
        self.calls = (*self.calls, (spec.name, canonical_json(args)))
        try:
            output: Any = json.loads(text) if text else None
        except ValueError:
            output = text
        if status >= 400:
            return ToolResult(
                call.id,
                call.name,
                args,
                error={"type": "http_error", "message": f"HTTP {status}", "body": output},
            )
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
        return {"calls": [[n, json.loads(a)] for n, a in self.calls]}

    def state_hash(self) -> str:
        return stable_hash(self.state())

    def diff(self, a: EnvSnapshot, b: EnvSnapshot | None = None) -> StateDiff:
        def tables(calls: tuple[tuple[str, str], ...]) -> State:
            return State({"calls": {str(i): [n, a] for i, (n, a) in enumerate(calls)}})

        return diff(tables(a.state), tables(self.calls if b is None else b.state))
