"""``backend: sim`` — the simulator behind every role, in process or over HTTP.

1. pick the behaviour: ``metadata.role``, else the ``sim.role`` setting, else the role's name
   (``ROLE_BEHAVIOURS``); a request with no known behaviour gets a generic reply;
2. validate ``metadata`` against the behaviour's contract (``contracts.py``); an invalid
   payload is an error of the calling stage, reported on the request;
3. for each of the ``n`` choices, seed the draws with (sim seed, behaviour, request seed,
   choice index, hash of the metadata with what reads as a time or a minted id masked,
   :mod:`trajsynth.core.volatile`) — at temperature 0 every choice is the same, as with
   greedy decoding — and run the behaviour;
4. render the result as the API would return it: calls as native ``tool_calls`` or as text
   (Hermes, pythonic or JSON list, per ``call_format``), reasoning, token log-probabilities
   (lower where an error was injected, so a probe's perplexity means something) and usage.

It is a simulator: scripted behaviour over ground truth, deterministic for a given seed and
request, for running every pipeline offline and for testing stages. It is never a model under
training and its outputs say nothing about any real LLM.
"""

from __future__ import annotations

import json
import random
from typing import Any

from pydantic import BaseModel, ValidationError

from ...core.errors import EndpointError
from ...core.ids import seed_from, stable_hash
from ...core.volatile import mask
from ..base import Backend, BackendReply, ChatRequest, RawChoice, TokenLogprob, Usage
from ..parsing import format_pythonic
from .actor import SimOutput, act, user_reply
from .contracts import (
    ROLE_BEHAVIOURS,
    ActorMeta,
    DirectorMeta,
    ExpanderMeta,
    JudgeMeta,
    QueryWriterMeta,
    ReflectorMeta,
    RewriterMeta,
    SimConfig,
    ToolMeta,
    UserMeta,
    VerifierMeta,
)
from .judge import judge, verify
from .repair import reflect, rewrite
from .text import count_tokens, tokenize
from .writers import direct, expand, write_queries

__all__ = ["SimBackend"]

_CONTRACTS: dict[str, type[BaseModel]] = {
    "actor": ActorMeta,
    "director": DirectorMeta,
    "user": UserMeta,
    "query_writer": QueryWriterMeta,
    "judge": JudgeMeta,
    "verifier": VerifierMeta,
    "rewriter": RewriterMeta,
    "reflector": ReflectorMeta,
    "expander": ExpanderMeta,
    "tool": ToolMeta,
}


class SimBackend(Backend):
    """The simulator (see the module docstring)."""

    name = "sim"

    def __init__(
        self, config: SimConfig | None = None, *, role: str = "generic", model: str = "sim"
    ) -> None:
        self.config = config or SimConfig()
        self.role = role
        self.model = model or "sim"

    def fingerprint(self) -> dict[str, Any]:
        return {"sim": self.config.model_dump(mode="json"), "role": self.role}

    async def complete(self, request: ChatRequest) -> BackendReply:
        return self.answer(request)

    # -- the work (synchronous: the server calls it directly) --------------------------------
    def answer(self, request: ChatRequest) -> BackendReply:
        meta_raw = request.metadata or {}
        role_name = meta_raw.get("role") or self.config.role or self.role
        behaviour = ROLE_BEHAVIOURS.get(str(role_name), "generic")
        meta: BaseModel | None = None
        if behaviour != "generic":
            payload = {"role": role_name, **meta_raw}
            try:
                meta = _CONTRACTS[behaviour].model_validate(payload)
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(x) for x in first["loc"]) or "metadata"
                raise EndpointError(
                    f"sim {behaviour}: invalid metadata: {where}: {first['msg']}"
                ) from None
        # the draws do not depend on what a replay may change (times, minted ids)
        meta_hash = stable_hash(mask(meta_raw, loose=False)) if meta_raw else ""
        greedy = request.temperature is not None and request.temperature == 0
        choices, completion_tokens = [], 0
        for i in range(request.n):
            key = [self.config.seed, behaviour, request.seed, 0 if greedy else i, meta_hash]
            out = self._run(behaviour, meta, request, key)
            raw, tokens = self._render(out, request, key)
            choices.append(raw)
            completion_tokens += tokens
        return BackendReply(
            choices=choices,
            usage=Usage(prompt_tokens=_prompt_tokens(request), completion_tokens=completion_tokens),
            model=self.model,
        )

    def _run(self, behaviour: str, meta: Any, request: ChatRequest, key: list[Any]) -> SimOutput:
        def rng(*parts: Any) -> random.Random:
            return random.Random(seed_from(*key, *parts))

        cfg, tools, msgs = self.config, request.tools, request.messages
        if behaviour == "actor":
            return act(meta, msgs, tools, cfg, key)
        if behaviour == "user":
            return user_reply(meta, msgs, cfg, rng)
        if behaviour == "director":
            return direct(meta, tools, cfg, rng)
        if behaviour == "query_writer":
            return write_queries(meta, tools, cfg, rng)
        if behaviour == "judge":
            return judge(meta, tools, cfg, rng)
        if behaviour == "verifier":
            return verify(meta, cfg, rng)
        if behaviour == "rewriter":
            return rewrite(meta, msgs, tools, cfg, rng)
        if behaviour == "reflector":
            return reflect(meta, tools, cfg, rng)
        if behaviour == "expander":
            return expand(meta, tools, cfg, rng)
        if behaviour == "tool":
            return SimOutput(content=json.dumps(meta.proposal, ensure_ascii=False))
        return _generic(msgs, key)

    def _render(
        self, out: SimOutput, request: ChatRequest, key: list[Any]
    ) -> tuple[RawChoice, int]:
        fmt = self.config.call_format
        content, reasoning = out.content, out.reasoning
        calls: list[dict[str, str]] = []
        if out.calls and fmt == "native":
            calls = [
                {
                    "id": f"call_{stable_hash([*key, j, n], digest_size=6)}",
                    "name": n,
                    "arguments": a,
                }
                for j, (n, a) in enumerate(out.calls)
            ]
        elif out.calls:
            text = _calls_as_text(out.calls, fmt)
            content = f"{content}\n{text}" if content else text
            if fmt == "hermes" and reasoning:
                content = f"<think>\n{reasoning}\n</think>\n\n{content}"
                reasoning = None
        rendered = (content or "") + "".join(f"{n}{a}" for n, a in out.calls)
        tokens = tokenize(rendered)
        logprobs = None
        if request.logprobs:
            logprobs = _logprobs(tokens, out.uncertain, request.top_logprobs or 0, key)
        if request.max_tokens is not None and len(tokens) > request.max_tokens and content:
            finish = "length"
        else:
            finish = "tool_calls" if calls else "stop"
        return (
            RawChoice(
                content=content,
                reasoning=reasoning,
                tool_calls=calls,
                finish_reason=finish,
                logprobs=logprobs,
            ),
            len(tokens),
        )


def _calls_as_text(calls: list[tuple[str, str]], fmt: str) -> str:
    if fmt == "pythonic":
        parsed = []
        for name, args in calls:
            try:
                value = json.loads(args)
            except ValueError:
                value = None
            if not isinstance(value, dict) or not all(k.isidentifier() for k in value):
                return "[" + ", ".join(f"{n}({a})" for n, a in calls) + "]"
            parsed.append((name, value))
        return format_pythonic(parsed)
    objs = [f'{{"name": {json.dumps(n)}, "arguments": {a}}}' for n, a in calls]
    if fmt == "json":
        return "[" + ", ".join(objs) + "]"
    return "\n".join(f"<tool_call>\n{o}\n</tool_call>" for o in objs)


def _logprobs(tokens: list[str], uncertain: bool, top: int, key: list[Any]) -> list[TokenLogprob]:
    """Per-token log-probabilities: confident (mean NLL ≈ 0.03), borderline (≈ 0.35, a quarter
    of correct outputs) or, where an error was injected, unsure (≈ 0.8)."""
    r = random.Random(seed_from(*key, "logprobs"))
    mean = 0.8 if uncertain else (0.03 if r.random() < 0.75 else 0.35)
    out = []
    for tok in tokens:
        lp = -r.expovariate(1.0 / mean)
        alts = [(f"{tok}~{j}", lp - 1.0 - j) for j in range(max(0, top - 1))]
        out.append(TokenLogprob(token=tok, logprob=lp, top=[(tok, lp), *alts] if top else []))
    return out


def _prompt_tokens(request: ChatRequest) -> int:
    n = 0
    for m in request.messages:
        c = m.get("content")
        if isinstance(c, str):
            n += count_tokens(c) + 4
        if m.get("tool_calls"):
            n += count_tokens(json.dumps(m["tool_calls"]))
    if request.tools:
        n += count_tokens(json.dumps(request.tools))
    return n


def _generic(messages: list[dict[str, Any]], key: list[Any]) -> SimOutput:
    last = next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), None)
    text = str(last or "")[:80]
    return SimOutput(
        content=f"(simulated reply {stable_hash(key, digest_size=3)}) You said: {text}"
    )
