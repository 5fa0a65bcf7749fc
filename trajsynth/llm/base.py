"""The one LLM interface every role and backend shares.

A stage asks its context for a role (``ctx.llm("teacher")``) and awaits ``chat``::

    result = await ctx.llm("teacher").chat(
        messages,                      # OpenAI chat messages (dicts or core Message)
        tools=row.tools,               # the OpenAI `tools` list, or None
        n=1, temperature=0.7, seed=ctx.row_seed(row.id),
        metadata={"role": "teacher", "ground_truth": row.ground_truth.model_dump(mode="json")},
    )
    if result.ok:
        msg = result.choices[0].message        # a trajsynth.core.Message (assistant)
        errors = result.choices[0].format_errors
    else:
        row_error = result.error               # the final failure, recorded on the row

Four backends sit behind it (``backend:`` in a role's config):

- ``openai``: any OpenAI-compatible endpoint over HTTP (``trajsynth.llm.openai_backend``);
- ``openai_batch``: the same endpoint's batch API (``/v1/files`` + ``/v1/batches``) at batch
  prices, requests collected into batch files (``trajsynth.llm.openai_batch``);
- ``sim``: the seeded simulator, the offline default for every role (``trajsynth.llm.sim``);
- ``local``: a transformers causal LM from a folder (``trajsynth.llm.local``).

This module defines the request and result records, the role configuration (one
:class:`RoleConfig` per ``llm: {role: {...}}`` entry of a pipeline) and the backend protocol.
The client that adds caching, usage accounting and error recording is in
``trajsynth.llm.client``.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from ..core.config import StrictModel
from ..core.errors import ConfigError, EndpointError, InfraError
from ..core.schema import Message

__all__ = [
    "INFRA_ERROR_TYPES",
    "Backend",
    "BackendReply",
    "BatchConfig",
    "ChatRequest",
    "ChatResult",
    "Choice",
    "FatalEndpointError",
    "LocalConfig",
    "Prices",
    "RawChoice",
    "RoleConfig",
    "TokenLogprob",
    "Usage",
]


#: ``ChatResult.error_type`` values that are the endpoint's failure, not the model's
INFRA_ERROR_TYPES = frozenset({"infra", "rate_limited", "circuit_open"})

# --------------------------------------------------------------------------------------
# records
# --------------------------------------------------------------------------------------


class TokenLogprob(BaseModel):
    """Log-probability of one generated token (OpenAI ``logprobs.content[i]``)."""

    model_config = ConfigDict(extra="forbid")

    token: str
    logprob: float
    top: list[tuple[str, float]] = Field(
        default_factory=list, description="Most likely alternatives (token, logprob), if asked."
    )


class Usage(BaseModel):
    """Token counts of one request (summed over choices and fanned-out requests)."""

    model_config = ConfigDict(extra="forbid")

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
        )


class Choice(BaseModel):
    """One sampled completion, parsed.

    ``message`` is an assistant :class:`~trajsynth.core.Message` (content, reasoning,
    tool_calls) ready to append to a trajectory. ``format_errors`` lists what the shared parser
    could not read (one string each, with the raw text); ``raw`` keeps the text as generated.
    """

    model_config = ConfigDict(extra="forbid")

    index: int = 0
    message: Message
    finish_reason: str | None = None
    logprobs: list[TokenLogprob] | None = None
    format_errors: list[str] = Field(default_factory=list)
    repairs: list[str] = Field(
        default_factory=list, description="Near-JSON the parser repaired (not errors)."
    )
    raw: str | None = Field(default=None, description="Generated text before parsing.")
    token_ids: list[int] | None = Field(
        default=None,
        description="Generated token ids as generated, the end-of-turn token included when the "
        "model stopped on it (local backend), for training.",
    )

    @property
    def mean_logprob(self) -> float | None:
        """Average token log-probability (LoopTool GCP's ``avg_log_prob``), if known."""
        if not self.logprobs:
            return None
        return sum(t.logprob for t in self.logprobs) / len(self.logprobs)


class ChatResult(BaseModel):
    """What ``chat`` returns: the choices, or the final error of a request that failed.

    A request that finally fails (retries exhausted, a 4xx answer) is not raised: ``error``
    holds the message and ``choices`` is empty, so the stage records it on its row. Errors
    that would fail every row the same way (bad API key, unknown model, an endpoint that
    never answered) are raised as :class:`FatalEndpointError` instead.
    """

    model_config = ConfigDict(extra="forbid")

    choices: list[Choice] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    model: str = ""
    backend: str = ""
    cached: bool = False
    cost_usd: float = 0.0
    error: str | None = None
    error_type: str | None = Field(
        default=None,
        description="endpoint (the request was refused, or no choices), or an infrastructure "
        "failure: infra (retries exhausted), rate_limited, circuit_open.",
    )
    partial_errors: list[str] = Field(
        default_factory=list, description="Fanned-out sub-requests that failed (n > 1)."
    )
    attempts: int = Field(default=0, description="HTTP requests sent for this call.")
    timeouts: int = Field(
        default=0,
        description="Attempts of this call cut by the client's timeout. Such a request may "
        "never have reached the server (a client event loop lagging behind the timeout cuts "
        "a request before it is written), so a server can count fewer than `attempts`.",
    )
    hedges: int = Field(
        default=0,
        description="Of `attempts`, duplicates sent for a slow request (hedged requests); "
        "the slower of each pair is cancelled, possibly before the server read it.",
    )
    cache_key: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.choices)

    @property
    def infra(self) -> bool:
        """The request failed for good because of the endpoint, not the model (retries
        exhausted, 429s, circuit open): not a rollout's outcome, see :meth:`raise_for_infra`."""
        return self.error_type in INFRA_ERROR_TYPES

    def raise_for_infra(self) -> None:
        """Raise :class:`~trajsynth.core.errors.InfraError` when :attr:`infra`: what rollout
        code calls before it would turn a failed request into a rejected row."""
        if self.infra:
            raise InfraError(self.error or "the endpoint failed")

    @property
    def message(self) -> Message:
        """The first choice's message (raises the recorded error if there is none)."""
        self.raise_for_error()
        return self.choices[0].message

    def raise_for_error(self) -> None:
        """Raise the recorded failure as an :class:`EndpointError` (for callers that want it)."""
        if self.error is not None or not self.choices:
            raise EndpointError(self.error or "the endpoint returned no choices")


class ChatRequest(BaseModel):
    """A request as the backends see it (messages in OpenAI dict form, defaults applied)."""

    model_config = ConfigDict(extra="forbid")

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    n: int = 1
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    stop: list[str] | None = None
    metadata: dict[str, Any] | None = None
    extra_body: dict[str, Any] | None = None
    prompt_token_ids: list[int] | None = Field(
        default=None,
        description="Local backend: generate from exactly these ids (token in) instead of "
        "rendering the messages; other backends do not accept it.",
    )


class RawChoice(BaseModel):
    """A choice as a backend produced it, before the shared parser runs."""

    model_config = ConfigDict(extra="forbid")

    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[dict[str, str]] = Field(
        default_factory=list, description="Native calls: {id, name, arguments (raw text)}."
    )
    finish_reason: str | None = None
    logprobs: list[TokenLogprob] | None = None
    token_ids: list[int] | None = None


class BackendReply(BaseModel):
    """A backend's answer: raw choices, usage and bookkeeping."""

    model_config = ConfigDict(extra="forbid")

    choices: list[RawChoice]
    usage: Usage = Field(default_factory=Usage)
    model: str = ""
    attempts: int = 0
    timeouts: int = 0
    hedges: int = 0
    partial_errors: list[str] = Field(default_factory=list)


class FatalEndpointError(EndpointError):
    """An endpoint error that would fail every request alike (auth, unknown model, unreachable).

    Raised out of ``chat`` (and so out of the stage, as one clear message) instead of being
    recorded on each row.
    """


# --------------------------------------------------------------------------------------
# role configuration
# --------------------------------------------------------------------------------------


class Prices(StrictModel):
    """Price table of a role, in US dollars per million tokens (0 = free / unknown)."""

    prompt_per_mtok: float = Field(0.0, ge=0, description="$ per 1M prompt tokens.")
    completion_per_mtok: float = Field(0.0, ge=0, description="$ per 1M completion tokens.")
    batch_factor: float = Field(
        0.5,
        ge=0,
        description="Batch price as a share of the live price (backend openai_batch), unless "
        "batch_prompt_per_mtok / batch_completion_per_mtok are set.",
    )
    batch_prompt_per_mtok: float | None = Field(
        None, ge=0, description="$ per 1M prompt tokens sent in batches."
    )
    batch_completion_per_mtok: float | None = Field(
        None, ge=0, description="$ per 1M completion tokens answered in batches."
    )

    def cost(self, usage: Usage, *, batch: bool = False) -> float:
        """Dollars for ``usage`` at the live price, or at the batch price when ``batch``."""
        prompt, completion = self.prompt_per_mtok, self.completion_per_mtok
        if batch:
            f = self.batch_factor
            bp, bc = self.batch_prompt_per_mtok, self.batch_completion_per_mtok
            prompt = f * prompt if bp is None else bp
            completion = f * completion if bc is None else bc
        return (usage.prompt_tokens * prompt + usage.completion_tokens * completion) / 1e6


class LocalConfig(StrictModel):
    """Settings of ``backend: local`` (a transformers causal LM from a folder)."""

    device: str = Field("cpu", description="torch device, e.g. cpu or cuda:0.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "float32", description="Weights dtype."
    )
    batch_size: int = Field(16, ge=1, description="Largest number of prompts generated at once.")
    batch_wait_ms: float = Field(
        5.0, ge=0, description="How long the batcher waits to fill a batch."
    )
    max_new_tokens: int = Field(256, ge=1, description="Default generation length.")
    autocast: Literal["none", "bf16"] = Field(
        "none", description="bf16: generate under bf16 autocast (fp32 weights on a GPU)."
    )
    prefix_cache_mb: int = Field(
        1024,
        ge=0,
        description="Memory for reusing the attention keys and values of earlier prompts "
        "that share a prefix with a new one (an episode's growing history, a shared system "
        "prompt and tool list); 0 turns it off.",
    )


class BatchConfig(StrictModel):
    """Settings of ``backend: openai_batch`` (the endpoint's ``/v1/batches`` API)."""

    flush_idle_s: float = Field(
        2.0,
        gt=0,
        description="A batch is submitted once no new request arrived for this long (so the "
        "open episodes of a rollout stage go together, one turn per batch).",
    )
    max_wait_s: float = Field(
        60.0, gt=0, description="...or once its oldest request waited this long."
    )
    max_requests: int = Field(
        50_000, ge=1, description="...or once it holds this many requests (OpenAI: 50,000)."
    )
    max_bytes: int = Field(
        150_000_000, ge=1, description="...or this many bytes of JSONL (OpenAI: 200 MB)."
    )
    poll_s: float = Field(30.0, gt=0, description="Seconds between polls of a running batch.")
    completion_window: str = Field("24h", description="The batch's completion window.")
    journal: bool = Field(
        True,
        description="Record submitted batches in the run folder (batches/journal.jsonl) so a "
        "resumed run collects them instead of submitting again.",
    )


class RoleConfig(StrictModel):
    """One LLM role of a pipeline (``defaults.llm.<role>``).

    Example (YAML)::

        llm:
          "*":     {cache: true}                # applies to every role (optional)
          teacher: {backend: openai, base_url: http://127.0.0.1:8000/v1, model: qwen3-8b,
                    api_key_env: VLLM_KEY, max_concurrency: 128,
                    prices: {prompt_per_mtok: 0.2, completion_per_mtok: 0.6}}
          judge:   {backend: sim, sim: {judge_accuracy: 0.85}}
    """

    backend: Literal["openai", "openai_batch", "sim", "local"] = Field(
        "sim",
        description="openai (any OpenAI-compatible HTTP endpoint), openai_batch (its batch "
        "API), sim, or local.",
    )
    model: str = Field("", description="Model name (openai) or folder (local).")
    base_url: str | None = Field(
        None, description="Endpoint, e.g. http://127.0.0.1:8000/v1 (openai backend)."
    )
    api_key: SecretStr | None = Field(
        None, description="API key; prefer api_key_env. Never written to outputs or logs."
    )
    api_key_env: str | None = Field(
        None, description="Environment variable holding the API key (default OPENAI_API_KEY)."
    )
    # sampling defaults (a chat() argument overrides each)
    temperature: float | None = Field(None, ge=0, description="Default temperature.")
    top_p: float | None = Field(None, gt=0, le=1, description="Default top_p.")
    max_tokens: int | None = Field(None, ge=1, description="Default max_tokens.")
    extra_body: dict[str, Any] = Field(
        default_factory=dict,
        description="Extra request fields sent as-is (e.g. top_k, chat_template_kwargs).",
    )
    # concurrency and retries (openai backend)
    max_concurrency: int = Field(
        64,
        ge=1,
        description="Requests in flight per (base_url, model) at most, all roles together; "
        "a role that is being rate limited (429s) has its own limit halved, grown back by one "
        "per window of successes (AIMD).",
    )
    min_concurrency: int = Field(1, ge=1, description="AIMD never goes below this.")
    timeout_s: float = Field(
        600.0, gt=0, description="Per-HTTP-request timeout (waiting for a slot never counts)."
    )
    connect_timeout_s: float = Field(10.0, gt=0, description="TCP connect timeout.")
    hedge_budget: float = Field(
        0.1,
        ge=0,
        le=1,
        description="Hedged requests: a request unanswered after the hedging delay is sent "
        "once more (twice at most), the first copy to finish wins, so a hung request costs "
        "about that delay instead of `timeout_s`. At most this fraction of requests are "
        "duplicates (0: off). A paid API may bill a cancelled copy, whose usage is never "
        "read: the usage table counts the copies in `hedges`, not their tokens. Unseeded, "
        "the faster of two samples can favour shorter completions: set 0 where that "
        "matters.",
    )
    hedge_after_s: float | None = Field(
        None,
        gt=0,
        description="Hedged requests: the delay; null: the p95 latency of the role's last "
        "200 answered requests, at least `hedge_min_s` (none until 10 have been answered). "
        "Never more than half of `timeout_s`.",
    )
    hedge_min_s: float = Field(
        0.5, gt=0, description="Hedged requests: the shortest automatic delay."
    )
    http_client: Literal["auto", "aiohttp", "httpx"] = Field(
        "auto",
        description="The SDK's HTTP transport: aiohttp when installed (auto), or httpx.",
    )
    max_retries: int = Field(
        5, ge=0, description="Retries after 5xx, connection errors, timeouts, bad bodies."
    )
    max_rate_limit_retries: int = Field(
        30, ge=0, description="Retries after 429 (each waits retry-after)."
    )
    backoff_base_s: float = Field(0.5, gt=0, description="First backoff (doubles, with jitter).")
    backoff_max_s: float = Field(30.0, gt=0, description="Longest backoff.")
    circuit_failures: int = Field(
        20,
        ge=0,
        description="Circuit breaker: this many consecutive failed attempts of the role "
        "(5xx, connection errors, timeouts; not 429s) pause it circuit_pause_s, then one probe; "
        "still failing, its requests fail fast as infrastructure errors (0: off).",
    )
    circuit_pause_s: float = Field(
        30.0, gt=0, description="Circuit breaker: the pause before each probe."
    )
    native_n: bool | None = Field(
        None,
        description="n > 1 in one request (true), as separate requests (false), or try the "
        "server's n and fall back when it returns fewer choices (null).",
    )
    send_metadata: bool = Field(
        False,
        description="Send request metadata as the body field `trajsynth_metadata` (for "
        "`trajsynth serve --backend sim`, whose simulator reads it).",
    )
    # cache and accounting
    cache: bool | None = Field(
        None,
        description="Content-addressed response cache (default: on for openai/local, off for "
        "the simulator, which is cheaper than a disk read).",
    )
    cache_dir: str | None = Field(None, description="Cache folder (default: the run's cache).")
    prices: Prices = Field(default_factory=Prices, description="Price table for cost.")
    # backend-specific
    sim: dict[str, Any] = Field(
        default_factory=dict, description="Simulator settings (trajsynth.llm.sim.SimConfig)."
    )
    local: LocalConfig = Field(default_factory=LocalConfig, description="Local model settings.")
    batch: BatchConfig = Field(
        default_factory=BatchConfig, description="Batch API settings (backend openai_batch)."
    )

    @field_validator("base_url")
    @classmethod
    def _strip_slash(cls, v: str | None) -> str | None:
        return v.rstrip("/") if v else v

    def resolved_api_key(self) -> str:
        """The API key from config or environment ('' when none; local servers accept any)."""
        if self.api_key is not None:
            return self.api_key.get_secret_value()
        env = self.api_key_env or "OPENAI_API_KEY"
        value = os.environ.get(env)
        if value is None and self.api_key_env:
            raise ConfigError(
                f"llm role: api_key_env {self.api_key_env!r} is not set in the environment",
                hint=f"export {self.api_key_env}=... or set api_key in the role config",
            )
        return value or "sk-no-key"

    def use_cache(self) -> bool:
        return self.cache if self.cache is not None else self.backend != "sim"

    def identity(self) -> dict[str, Any]:
        """What identifies the model answering (part of every cache key; no secrets)."""
        if self.backend in ("openai", "openai_batch"):
            # the same model answers live and batch requests alike: they share cache entries
            return {"backend": "openai", "base_url": self.base_url or "", "model": self.model}
        if self.backend == "local":
            return {"backend": "local", "model": self.model}
        return {"backend": "sim", "model": self.model or "sim", "sim": self.sim}


# --------------------------------------------------------------------------------------
# backend protocol
# --------------------------------------------------------------------------------------


class Backend(ABC):
    """What a backend implements: one request in, raw choices out.

    Backends raise :class:`~trajsynth.core.errors.EndpointError` (or a subclass) for a request
    that finally failed; the client records it on the result. Everything else (defaults,
    caching, parsing, usage, cost) is the client's job, so a backend stays small.
    """

    name: str = "backend"

    @abstractmethod
    async def complete(self, request: ChatRequest) -> BackendReply:
        """Answer ``request`` with ``request.n`` choices."""

    def fingerprint(self) -> dict[str, Any]:
        """Extra cache-key material identifying the model's weights/config (default none)."""
        return {}

    async def aclose(self) -> None:
        """Release connections or models."""
