"""A scripted backend: answers come from a Python function (for stage tests).

Where the simulator plays a role from its metadata contract, a scripted backend returns
exactly what a test wants — a fixed judge verdict, a malformed call, a garbage generation —
so a stage's handling of each case can be asserted. It goes through the same client as every
backend (parsing, usage counters, error recording), so the stage code under test is the code
that runs against a real endpoint.

Example::

    def judge(request: ChatRequest) -> str:
        return "RESPONSE1_INCORRECT.\\nError Analysis: wrong city. Correct Approach: use Oslo."

    ctx = Context(ContextSpec(stage_id="jglv"))
    use_scripted(ctx, "judge", judge)          # ctx.llm("judge") now answers with `judge`
    rows = list(stage.process(batches, ctx))

The handler may return a string (the content), a :class:`RawChoice`, a list of either (one
per choice; shorter lists are cycled to ``n``), a :class:`BackendReply`, or raise
:class:`~trajsynth.core.errors.EndpointError` to simulate a request that finally failed.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from .base import Backend, BackendReply, ChatRequest, RawChoice, RoleConfig, Usage
from .client import LLMClient, MetricsSink, RoleClient

__all__ = ["ScriptedBackend", "scripted_client", "use_scripted"]

Handler = Callable[[ChatRequest], Any] | Callable[[ChatRequest], Awaitable[Any]]


class ScriptedBackend(Backend):
    """Answers each request with ``handler(request)`` (sync or async)."""

    name = "scripted"

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[ChatRequest] = []  # every request received, for assertions

    async def complete(self, request: ChatRequest) -> BackendReply:
        self.requests.append(request)
        out = self.handler(request)
        if inspect.isawaitable(out):
            out = await out
        if isinstance(out, BackendReply):
            return out
        items = out if isinstance(out, list) else [out]
        choices = [
            item
            if isinstance(item, RawChoice)
            else RawChoice(content=str(item), finish_reason="stop")
            for item in items
        ]
        if not choices:
            choices = [RawChoice(content="", finish_reason="stop")]
        choices = [choices[i % len(choices)] for i in range(request.n)]
        completion = sum(len((c.content or "").split()) for c in choices)
        prompt = sum(len(str(m.get("content") or "").split()) for m in request.messages)
        return BackendReply(
            choices=choices,
            usage=Usage(prompt_tokens=prompt, completion_tokens=completion),
            model="scripted",
        )


def scripted_client(
    role: str, handler: Handler, *, metrics: MetricsSink | None = None, **settings: Any
) -> RoleClient:
    """A role client answered by ``handler`` (``settings`` are RoleConfig fields, e.g.
    ``prices``; the backend field is ignored)."""
    config = RoleConfig.model_validate({**settings, "backend": "sim", "cache": False})
    return RoleClient(LLMClient(role, config, ScriptedBackend(handler), None), metrics)


def use_scripted(ctx: Any, role: str, handler: Handler, **settings: Any) -> ScriptedBackend:
    """Make ``ctx.llm(role)`` answer with ``handler`` (counting usage into ``ctx.metrics``);
    returns the backend, whose ``requests`` list records what the stage sent."""
    client = scripted_client(role, handler, metrics=ctx.metrics, **settings)
    ctx.use_client(role, client)
    backend = client.backend
    assert isinstance(backend, ScriptedBackend)  # scripted_client made it
    return backend
