"""The ``tool`` role: an LLM answers calls of tools that have only a spec (ToolACE, Liu et al.
2024, arXiv:2409.00920, §2.2; Kimi K2, arXiv:2507.20534, §3.1.1).

The ``simulated`` environment asks this role once per new (seed, state, call); it passes the
tool's spec, the call, the ledger of entities the call involves and its own proposal, and
keeps the model's answer only when it is valid against the tool's response schema.

Steps of :func:`tool_answerer`'s function:

1) the request: :data:`TOOL_PROMPT` as the system message, the spec, call, ledger and
   proposal as JSON in the user message, the whole query as ``metadata`` (the simulator,
   ``backend: sim``, answers from it), temperature 0 and a seed derived from (environment
   seed, state hash, call), so the response cache keys it by exactly that;
2) the request runs on a private event loop in its own thread: an environment steps from
   synchronous code and from coroutines alike, and this never re-enters the caller's loop;
3) the answer: JSON ``{"output": ...}`` → the output; ``{"error": ...}`` or unparsable text
   (the model's answer: ``tool_role.unreadable``) or a request the endpoint refused (a 4xx:
   ``tool_role.request_failed``) → ``None``, the environment's proposal stands. A request
   that failed for good because of the endpoint (retries exhausted, 429s, circuit open)
   raises :class:`~trajsynth.core.errors.InfraError` instead: the call has no answer, so the
   episode that made it is lost to the endpoint and counted by its stage, never played on
   with the proposal as if the model had answered.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from typing import Any

from ..core.errors import InfraError
from ..core.ids import seed_from
from ..core.schema import Message
from .client import MetricsSink, client_for_role

__all__ = ["TOOL_PROMPT", "tool_answerer"]

TOOL_PROMPT = """You simulate a software tool (an API). Given the tool's specification, the \
call, and the ledger of records that earlier calls created or changed, answer as the tool \
would: consistent with the ledger (an id it does not hold does not exist), realistic, and \
valid against the tool's response schema. A proposed answer is given; keep its ids and \
facts. Answer with JSON only: {"output": <the tool's output>} or \
{"error": {"type": "not_found", "message": "..."}}."""


class _Loop:
    """One event loop in a daemon thread, for tool-role requests of this process."""

    _instance: _Loop | None = None
    _guard = threading.Lock()

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="trajsynth-tool-role", daemon=True
        )
        self.thread.start()

    @classmethod
    def get(cls) -> _Loop:
        with cls._guard:
            if cls._instance is None or not cls._instance.thread.is_alive():
                cls._instance = _Loop()
            return cls._instance

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()


def tool_answerer(
    roles: dict[str, dict[str, Any]] | None,
    *,
    spec: Any = None,
    metrics: MetricsSink | None = None,
    role: str = "tool",
) -> Callable[[Any], Any]:
    """The answering function a ``simulated`` environment calls with a query (an object with
    ``to_json()``: seed, state_hash, tool, call, ledger, proposal); see the module docstring."""
    client = client_for_role(role, roles, spec=spec, metrics=metrics)
    count = metrics.inc if metrics is not None else (lambda name, n=1: None)

    def answer(query: Any) -> Any:
        q = query.to_json()
        user = json.dumps(
            {k: q[k] for k in ("tool", "call", "ledger", "proposal")}, ensure_ascii=False
        )
        coro = client.chat(
            [Message(role="system", content=TOOL_PROMPT), Message(role="user", content=user)],
            None,
            temperature=0,
            seed=seed_from("tool", q["seed"], q["state_hash"], q["call"]),
            metadata={"role": role, **q},
        )
        result = _Loop.get().run(coro)
        if not result.ok:
            if result.infra:
                raise InfraError(f"{role} role: {result.error or 'the endpoint failed'}")
            count("tool_role.request_failed")
            return None
        text = (result.choices[0].message.content or "").strip()
        try:
            data = json.loads(text[text.find("{") : text.rfind("}") + 1])
        except ValueError:
            count("tool_role.unreadable")
            return None
        if isinstance(data, dict) and "output" in data and "error" not in data:
            return data["output"]
        if not isinstance(data, dict) or "error" not in data:
            count("tool_role.unreadable")
        return None

    return answer
