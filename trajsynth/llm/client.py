"""The client a stage talks to: one per role and process, with a thin view per stage context.

``client_for_role(role, roles, spec=ctx.spec, metrics=ctx.metrics)`` returns a
:class:`RoleClient`: a view of the process-wide :class:`LLMClient` for that role's settings
(so every unit and stage of the process shares its connection pool, its endpoint's limiter and
its cache) that writes usage counters into the calling context's metrics, which the runner
merges into the run manifest per stage.

What ``chat`` does, in order:

1. build the request: messages in OpenAI form (``core.Message`` or dicts; reasoning is not
   sent), the role's sampling defaults under the call's arguments;
2. look the request up in the content-addressed cache (``cache.py``); a hit costs no request;
3. otherwise ask the backend; a request that finally fails is returned with ``error`` set
   (never dropped, never raised), except fatal endpoint errors (bad key, unknown model,
   unreachable endpoint), which are raised because every row would fail alike. A failure of
   the endpoint rather than the request (retries exhausted, 429s, circuit open) has an
   infrastructure ``error_type`` (``ChatResult.infra``): rollout code raises it
   (``raise_for_infra``) so that it is dropped and counted, never recorded as the model's;
4. clean every text of the reply (lone surrogates, NUL: ``core.text``), parse every choice
   with the shared parser (``parsing.py``) into an assistant ``Message`` plus format errors
   (an output over ``parsing.OFF_LOOP_CHARS`` characters in a worker thread, so a long reply
   does not stall the other requests in flight), store the raw reply in the cache, price the
   usage;
5. count, per role: ``llm.<role>.requests``, ``cache_hits``, ``http_requests``, ``errors``,
   ``infra_errors`` (of the errors, the endpoint's), ``timeouts`` (attempts cut by the
   timeout; such a request may never have reached the server), ``hedges`` (duplicates of
   slow requests, see ``openai_backend``), ``format_errors``,
   ``prompt_tokens``, ``completion_tokens``, ``cost_usd``.

Role settings come from the pipeline's ``defaults.llm``; the entry ``"*"`` applies to every
role, and a role that is not configured uses the simulator (the offline default).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Protocol

from pydantic import ValidationError

from ..core.errors import CircuitOpen, ConfigError, EndpointError, InfraError, RateLimited
from ..core.ids import stable_hash
from ..core.schema import Message, ToolCall
from ..core.text import clean_json, clean_text
from .base import (
    Backend,
    BackendReply,
    ChatRequest,
    ChatResult,
    Choice,
    FatalEndpointError,
    RoleConfig,
)
from .cache import ResponseCache, request_key
from .parsing import parse_output_async

__all__ = [
    "LLMClient",
    "RoleClient",
    "aclose",
    "build_backend",
    "client_for_role",
    "reset_clients",
    "role_config",
    "to_openai_messages",
]

NO_CACHE_ENV = "TRAJSYNTH_NO_LLM_CACHE"


class MetricsSink(Protocol):
    def inc(self, name: str, n: float = 1) -> None: ...


# --------------------------------------------------------------------------------------
# messages
# --------------------------------------------------------------------------------------


def _wire_call(call: ToolCall | dict[str, Any]) -> dict[str, Any]:
    if isinstance(call, ToolCall):
        return {
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments},
        }
    if isinstance(call.get("function"), dict):
        return {"id": call.get("id", ""), "type": "function", "function": call["function"]}
    args = call.get("arguments", "{}")
    if not isinstance(args, str):
        import json

        args = json.dumps(args, ensure_ascii=False)
    return {
        "id": call.get("id", ""),
        "type": "function",
        "function": {"name": call.get("name", ""), "arguments": args},
    }


def to_openai_messages(messages: Sequence[Message | dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages in the OpenAI wire form (tool_calls nested under ``function``)."""
    out = []
    for m in messages:
        if isinstance(m, Message):
            d: dict[str, Any] = {"role": m.role, "content": m.content}
            if m.tool_calls:
                d["tool_calls"] = [_wire_call(c) for c in m.tool_calls]
            if m.tool_call_id is not None:
                d["tool_call_id"] = m.tool_call_id
            if m.name is not None and m.role == "tool":
                d["name"] = m.name
        else:
            d = {"role": m.get("role"), "content": m.get("content")}
            if m.get("tool_calls"):
                d["tool_calls"] = [_wire_call(c) for c in m["tool_calls"]]
            for k in ("tool_call_id", "name"):
                if m.get(k) is not None:
                    d[k] = m[k]
        out.append(d)
    return out


# --------------------------------------------------------------------------------------
# the client
# --------------------------------------------------------------------------------------


class LLMClient:
    """One role's backend with cache, parsing, usage and error recording (process-wide)."""

    def __init__(
        self, role: str, config: RoleConfig, backend: Backend, cache: ResponseCache | None
    ) -> None:
        self.role = role
        self.config = config
        self.backend = backend
        self.cache = cache
        self._identity = {**config.identity(), **backend.fingerprint()}
        self._key_has_metadata = config.backend == "sim" or config.send_metadata
        self._batch = bool(getattr(backend, "batch_priced", False))  # priced at batch rates

    @property
    def model(self) -> str:
        return self.config.model or self.config.backend

    async def chat(
        self,
        messages: Sequence[Message | dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        n: int = 1,
        temperature: float | None = None,
        top_p: float | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
        logprobs: bool = False,
        top_logprobs: int | None = None,
        stop: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        extra_body: dict[str, Any] | None = None,
        prompt_token_ids: list[int] | None = None,
        use_cache: bool = True,
        sink: MetricsSink | None = None,
    ) -> ChatResult:
        """Ask the role's model; see the module docstring for the steps."""
        cfg = self.config
        if prompt_token_ids is not None and self.backend.name != "local":
            raise ConfigError(
                f"role {self.role!r}: prompt_token_ids (token in) needs backend: local, "
                f"not {self.backend.name}"
            )
        # 1) the request, with the role's defaults under the call's arguments
        request = ChatRequest.model_construct(
            messages=to_openai_messages(messages),
            tools=tools or None,
            n=n,
            temperature=cfg.temperature if temperature is None else temperature,
            top_p=cfg.top_p if top_p is None else top_p,
            max_tokens=cfg.max_tokens if max_tokens is None else max_tokens,
            seed=seed,
            logprobs=logprobs,
            top_logprobs=top_logprobs,
            stop=stop,
            metadata=metadata,
            extra_body=extra_body,
            prompt_token_ids=prompt_token_ids,
        )
        prefix = f"llm.{self.role}."
        count = sink.inc if sink is not None else (lambda name, n=1: None)
        count(prefix + "requests")

        # 2) the cache
        key = None
        if self.cache is not None and use_cache:
            key = request_key(self._identity, request, with_metadata=self._key_has_metadata)
            entry = self.cache.get(key)
            if entry is not None:
                try:
                    reply = BackendReply.model_validate(entry["reply"])
                except (ValidationError, KeyError):
                    reply = None
                if reply is not None:
                    reply = _clean_reply(reply)
                    count(prefix + "cache_hits")
                    result = await self._result(reply, key, cached=True)
                    self._count(result, count, prefix, cached=True)
                    return result

        # 3) the backend
        try:
            reply = await self.backend.complete(request)
        except FatalEndpointError:
            raise
        except EndpointError as exc:
            result = ChatResult(
                model=self.model,
                backend=self.backend.name,
                error=str(exc),
                error_type=_error_type(exc),
                attempts=int(getattr(exc, "attempts", 0)),
                timeouts=int(getattr(exc, "timeouts", 0)),
                hedges=int(getattr(exc, "hedges", 0)),
                cache_key=key,
            )
            count(prefix + "errors")
            if result.infra:
                count(prefix + "infra_errors")
            self._count_sent(result, count, prefix)
            return result

        # 4) clean the text (lone surrogates, NUL), parse, cache, price
        reply = _clean_reply(reply)
        result = await self._result(reply, key, cached=False)
        if key is not None and self.cache is not None and result.ok:  # a key: there is a cache
            self.cache.put(key, {"reply": reply.model_dump(mode="json")})
        self._count(result, count, prefix, cached=False)
        return result

    async def _result(self, reply: BackendReply, key: str | None, *, cached: bool) -> ChatResult:
        choices = []
        for i, raw in enumerate(reply.choices):
            # a long output is parsed in a worker thread: the event loop keeps serving the
            # other requests in flight meanwhile
            parsed = await parse_output_async(raw.content, raw.tool_calls, reasoning=raw.reasoning)
            choices.append(
                Choice(
                    index=i,
                    message=Message(
                        role="assistant",
                        content=parsed.content,
                        tool_calls=parsed.calls,
                        reasoning=parsed.reasoning,
                    ),
                    finish_reason=raw.finish_reason,
                    logprobs=raw.logprobs,
                    format_errors=parsed.errors,
                    repairs=parsed.repairs,
                    raw=raw.content,
                    token_ids=raw.token_ids,
                )
            )
        error = None
        if not choices:
            error = "; ".join(reply.partial_errors) or "the endpoint returned no choices"
        return ChatResult(
            choices=choices,
            usage=reply.usage,
            model=reply.model or self.model,
            backend=self.backend.name,
            cached=cached,
            cost_usd=0.0 if cached else self.config.prices.cost(reply.usage, batch=self._batch),
            error=error,
            error_type="endpoint" if error else None,
            partial_errors=reply.partial_errors,
            attempts=0 if cached else reply.attempts,
            timeouts=0 if cached else reply.timeouts,
            hedges=0 if cached else reply.hedges,
            cache_key=key,
        )

    @staticmethod
    def _count_sent(result: ChatResult, count: Any, prefix: str) -> None:
        """The HTTP requests a call sent; of them, those cut by the timeout and duplicates."""
        count(prefix + "http_requests", result.attempts)
        if result.timeouts:
            count(prefix + "timeouts", result.timeouts)
        if result.hedges:
            count(prefix + "hedges", result.hedges)

    @staticmethod
    def _count(result: ChatResult, count: Any, prefix: str, *, cached: bool) -> None:
        if not cached:
            count(prefix + "prompt_tokens", result.usage.prompt_tokens)
            count(prefix + "completion_tokens", result.usage.completion_tokens)
            LLMClient._count_sent(result, count, prefix)
            if result.cost_usd:
                count(prefix + "cost_usd", result.cost_usd)
        if result.error:
            count(prefix + "errors")
        errors = sum(len(c.format_errors) for c in result.choices)
        if errors:
            count(prefix + "format_errors", errors)


def _error_type(exc: EndpointError) -> str:
    """``ChatResult.error_type`` of a backend's error (``base.INFRA_ERROR_TYPES`` are the
    endpoint's failures)."""
    if isinstance(exc, RateLimited):
        return "rate_limited"
    if isinstance(exc, CircuitOpen):
        return "circuit_open"
    if isinstance(exc, InfraError):
        return "infra"
    return "endpoint"


def _clean_reply(reply: BackendReply) -> BackendReply:
    """The reply with every text field made valid UTF-8 without NUL (``core.text``): what a
    model wrote must not break the cache, Parquet, logs or ids downstream."""
    for raw in reply.choices:
        if raw.content is not None:
            raw.content = clean_text(raw.content)
        if raw.reasoning is not None:
            raw.reasoning = clean_text(raw.reasoning)
        if raw.tool_calls:
            raw.tool_calls = clean_json(raw.tool_calls)
        if raw.logprobs:
            for lp in raw.logprobs:
                lp.token = clean_text(lp.token)
                if lp.top:
                    lp.top = [(clean_text(t), v) for t, v in lp.top]
    if reply.model:
        reply.model = clean_text(reply.model)
    reply.partial_errors = [clean_text(e) for e in reply.partial_errors]
    return reply


class RoleClient:
    """A role's client as one stage context sees it: shared client, own usage counters.

    ``await client.chat(messages, tools=None, n=1, temperature=None, top_p=None,
    max_tokens=None, seed=None, logprobs=False, metadata=None, ...)`` → :class:`ChatResult`.
    """

    def __init__(self, client: LLMClient, metrics: MetricsSink | None = None) -> None:
        self._client = client
        self._metrics = metrics

    @property
    def role(self) -> str:
        return self._client.role

    @property
    def config(self) -> RoleConfig:
        return self._client.config

    @property
    def model(self) -> str:
        return self._client.model

    @property
    def backend(self) -> Backend:
        return self._client.backend

    async def chat(
        self,
        messages: Sequence[Message | dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return await self._client.chat(messages, tools, sink=self._metrics, **kwargs)


# --------------------------------------------------------------------------------------
# registry
# --------------------------------------------------------------------------------------

_REGISTRY: dict[str, LLMClient] = {}
_REGISTRY_LOCK = threading.Lock()


def role_config(role: str, roles: dict[str, dict[str, Any]] | None) -> RoleConfig:
    """The validated settings of ``role``: ``"*"`` defaults, then the role's own entry."""
    roles = roles or {}
    raw = {**(roles.get("*") or {}), **(roles.get(role) or {})}
    try:
        return RoleConfig.model_validate(raw)
    except ValidationError as exc:
        parts = []
        for err in exc.errors():
            loc = ".".join(str(x) for x in err["loc"])
            msg = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
            parts.append(f"defaults.llm.{role}.{loc}: {msg}")
        raise ConfigError("; ".join(parts)) from None


def build_backend(role: str, config: RoleConfig, *, run_dir: str | None = None) -> Backend:
    """The backend object for a role's settings (``run_dir``: where a batch backend keeps its
    journal of submitted batches)."""
    if config.backend == "openai":
        from .openai_backend import OpenAIBackend

        return OpenAIBackend(config, role=role)
    if config.backend == "openai_batch":
        from .openai_batch import OpenAIBatchBackend

        return OpenAIBatchBackend(config, role=role, state_dir=run_dir)
    if config.backend == "local":
        from .local import LocalBackend

        return LocalBackend(config)
    from .sim import SimBackend, SimConfig

    try:
        sim = SimConfig.model_validate(config.sim)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        msg = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
        raise ConfigError(f"defaults.llm.{role}.sim.{loc}: {msg}") from None
    return SimBackend(sim, role=role, model=config.model or "sim")


def client_for_role(
    role: str,
    roles: dict[str, dict[str, Any]] | None,
    *,
    spec: Any = None,
    metrics: MetricsSink | None = None,
) -> RoleClient:
    """The client for ``role`` (``trajsynth.stages.context.Context.llm`` calls this).

    ``spec`` is the stage's ``ContextSpec`` (its ``cache_dir`` is the default cache);
    ``metrics`` receives the usage counters. Clients are shared per process by settings.
    """
    import os

    config = role_config(role, roles)
    cache_dir = config.cache_dir or (getattr(spec, "cache_dir", None) if spec else None)
    use_cache = config.use_cache() and cache_dir is not None and not os.environ.get(NO_CACHE_ENV)
    run_dir = None
    if config.backend == "openai_batch" and spec is not None:
        run_dir = getattr(spec, "run_dir", None) or getattr(spec, "cache_dir", None)
    key = stable_hash(
        {
            "role": role,
            "config": config.model_dump(mode="json", exclude={"api_key"}),
            "key": stable_hash(config.api_key.get_secret_value()) if config.api_key else None,
            "cache": cache_dir if use_cache else None,
            "run_dir": run_dir,
        }
    )
    with _REGISTRY_LOCK:
        client = _REGISTRY.get(key)
        if client is None:
            backend = build_backend(role, config, run_dir=run_dir)
            cache = ResponseCache(cache_dir) if use_cache and cache_dir else None
            client = _REGISTRY[key] = LLMClient(role, config, backend, cache)
    return RoleClient(client, metrics)


async def aclose() -> None:
    """Close the HTTP connections that clients opened on the running event loop.

    ``asyncio.run(main())`` users: end ``main`` with ``await trajsynth.llm.aclose()``.
    """
    import sys

    if "trajsynth.llm.openai_backend" in sys.modules:
        from .openai_backend import aclose_http_clients

        await aclose_http_clients()
    if "trajsynth.llm.openai_batch" in sys.modules:
        from .openai_batch import aclose_batch_clients

        await aclose_batch_clients()


def reset_clients() -> None:
    """Forget every process-wide client (tests; a new run with new settings)."""
    with _REGISTRY_LOCK:
        _REGISTRY.clear()
