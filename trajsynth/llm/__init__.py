"""LLM backends behind one interface (layer ``llm``; imports only ``core``).

``ctx.llm(role)`` in a stage returns ``client_for_role(role, spec.llm, spec=spec,
metrics=ctx.metrics)``: a :class:`RoleClient` whose ``await chat(messages, tools=None, n=1,
temperature=..., top_p=..., max_tokens=..., seed=None, logprobs=False, metadata=None)`` returns
a :class:`ChatResult` (parsed choices, usage, cost, or the recorded final error).

Modules:

- ``base``: records (:class:`ChatResult`, :class:`Choice`, :class:`Usage`), :class:`RoleConfig`,
  the :class:`Backend` protocol;
- ``client``: caching, parsing, usage accounting, error recording, the per-process registry;
- ``openai_backend`` (+ ``limiter``): any OpenAI-compatible endpoint, adaptive concurrency,
  retries by error class;
- ``openai_batch``: the endpoint's batch API (``/v1/files`` + ``/v1/batches``), requests
  collected into batch files, a journal in the run folder so a resumed run collects them;
- ``sim``: the seeded simulator for every role (the offline default);
- ``local``: a transformers causal LM from a folder, batched;
- ``scripted``: answers from a Python function, for stage tests (``use_scripted(ctx, ...)``);
- ``parsing``: tool-call parsing shared by all backends;
- ``cache``: the content-addressed response cache;
- ``server``: ``trajsynth serve``, an OpenAI-compatible server over sim or local.
"""

from .base import (
    Backend,
    BackendReply,
    ChatRequest,
    ChatResult,
    Choice,
    FatalEndpointError,
    Prices,
    RawChoice,
    RoleConfig,
    TokenLogprob,
    Usage,
)
from .client import (
    LLMClient,
    RoleClient,
    aclose,
    build_backend,
    client_for_role,
    reset_clients,
    role_config,
    to_openai_messages,
)
from .parsing import ParseResult, parse_output
from .scripted import ScriptedBackend, scripted_client, use_scripted
from .usage import llm_usage

__all__ = [
    "Backend",
    "BackendReply",
    "ChatRequest",
    "ChatResult",
    "Choice",
    "FatalEndpointError",
    "LLMClient",
    "ParseResult",
    "Prices",
    "RawChoice",
    "RoleClient",
    "RoleConfig",
    "ScriptedBackend",
    "TokenLogprob",
    "Usage",
    "aclose",
    "build_backend",
    "client_for_role",
    "llm_usage",
    "parse_output",
    "reset_clients",
    "role_config",
    "scripted_client",
    "to_openai_messages",
    "use_scripted",
]
