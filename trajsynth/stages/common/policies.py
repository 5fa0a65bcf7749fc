"""Adapters from ``ctx.llm(role)`` to the episode runner's protocols
(:mod:`trajsynth.envs.episode`): a policy, a user simulator, and Magnet's edge judge.

Each writes the real prompt a model behind an endpoint reads *and* the metadata the
simulator reads (its contracts are in :mod:`trajsynth.llm.sim.contracts`):

- :class:`LLMPolicy` (teacher, actor, policy roles): the conversation and the tools; metadata
  ``{"role", "ground_truth", "hint", "hint_steps", "sample"}``. With ``hint`` (Magnet's
  context distillation) the gold calls of the current turn are appended to that turn's
  request as ``[Hint]`` in what is *sent*; the episode records the request without it.
  ``hint_steps`` replaces them with other calls (Magnet's misleading hint, for negatives).
  ``sample(messages, tools, n)`` asks for ``n`` choices in one request (TSR's candidates);
- :class:`LLMUser` (user, user_simulator roles): plays the user of the conversation, given an
  outline of needs (director-actor) and a persona; metadata ``{"role", "ground_truth",
  "persona"}``; the stop token ends the episode;
- :func:`edge_judge`: Magnet's LLM check of a graph edge (judge role, mode ``edge``). A
  refused request (``edge_judge.request_failed``) or an unreadable answer
  (``edge_judge.unreadable``) keeps the edge (the types already agree); checks lost to the
  endpoint are counted (``infra.lost`` of ``infra.units``, the checks asked) and then raise
  :class:`~trajsynth.core.errors.InfraError`: a graph is never built from edges nobody judged;

A request that fails for good (``ChatResult.error``) raises :class:`PolicyError`, which the
stage records on the row as a rejection at the ``generation`` layer — unless the endpoint, not
the request, failed (retries exhausted, 429s, circuit open: ``ChatResult.infra``): that raises
:class:`~trajsynth.core.errors.InfraError`, which is no ``PolicyError``, so the stage drops
the rollout and counts it (``infra.lost``) instead of recording it as the model's failure.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ...core.errors import InfraError
from ...core.schema import Message
from ...core.task import GoldCall, GroundTruth
from ...envs.episode import PolicyStep, UserEvent, turn_starts
from ...graph.signature import EdgeQuestion
from ..context import Context

__all__ = [
    "USER_PROMPT",
    "LLMPolicy",
    "LLMUser",
    "PolicyError",
    "edge_judge",
    "format_calls",
    "sim_task",
]


class PolicyError(Exception):
    """An LLM request failed for good; the rollout cannot go on."""


#: what the simulator needs of a task's ground truth: not the calls' recorded outputs nor
#: ``extra`` (bindings, paths), which only make every request larger
_SLIM: dict[str, Any] = {
    "extra": True,
    "turns": {"__all__": {"steps": {"__all__": {"__all__": {"output"}}}}},
}


def sim_task(task: GroundTruth) -> dict[str, Any]:
    """The ground truth as the simulated roles read it from request metadata."""
    return task.model_dump(mode="json", exclude=_SLIM)


def format_calls(steps: Sequence[Sequence[GoldCall]]) -> str:
    """Calls as the hint shows them: ``name({"arg": value})``, one step per line."""
    return "\n".join(
        "; ".join(f"{c.name}({json.dumps(c.arguments, ensure_ascii=False)})" for c in step)
        for step in steps
    )


class LLMPolicy:
    """A role as an episode policy (see the module docstring)."""

    def __init__(
        self,
        ctx: Context,
        role: str,
        *,
        task: GroundTruth | None,
        seed: int,
        temperature: float | None = None,
        hint: bool = False,
        hint_steps: dict[int, list[list[GoldCall]]] | None = None,
        logprobs: bool = False,
        sample: int = 0,
        max_tokens: int | None = None,
    ) -> None:
        self.client = ctx.llm(role)
        self.role = role
        self.task = task
        self.seed = seed
        self.temperature = temperature
        self.hint = hint
        self.hint_steps = hint_steps or {}
        self.logprobs = logprobs
        self.sample_index = sample
        self.max_tokens = max_tokens
        self.requests = 0
        self._task_json = sim_task(task) if task is not None else None

    def _metadata(self, turn: int) -> dict[str, Any] | None:
        if self._task_json is None:
            return None
        meta: dict[str, Any] = {
            "role": self.role,
            "ground_truth": self._task_json,
            "sample": self.sample_index,
        }
        if self.hint or turn in self.hint_steps:
            meta["hint"] = True
        if turn in self.hint_steps:
            meta["turn"] = turn
            meta["hint_steps"] = [
                [c.model_dump(mode="json") for c in step] for step in self.hint_steps[turn]
            ]
        return meta

    def _prompt(self, messages: Sequence[Message], turn: int, start: int) -> list[Message]:
        """The messages sent: the turn's request carries the [Hint] when there is one."""
        steps: list[list[GoldCall]] | None = self.hint_steps.get(turn)
        if steps is None and self.hint and self.task is not None and turn < len(self.task.turns):
            steps = self.task.turns[turn].steps
        if not steps:
            return list(messages)
        out = list(messages)
        req = out[start]
        out[start] = req.model_copy(
            update={
                "content": f"{req.content}\n\n[Hint] Reference calls for this request:\n"
                f"{format_calls(steps)}"
            }
        )
        return out

    async def sample(
        self, messages: Sequence[Message], tools: list[dict[str, Any]], n: int = 1
    ) -> list[PolicyStep]:
        starts = turn_starts(messages)
        turn = max(len(starts) - 1, 0)
        result = await self.client.chat(
            self._prompt(messages, turn, starts[-1] if starts else 0),
            tools,
            n=n,
            temperature=self.temperature,
            seed=self.seed,
            logprobs=self.logprobs,
            max_tokens=self.max_tokens,
            metadata=self._metadata(turn),
        )
        self.requests += 1
        if not result.ok:
            result.raise_for_infra()
            raise PolicyError(result.error or "the endpoint returned no choices")
        return [
            PolicyStep(
                message=c.message,
                format_errors=list(c.format_errors),
                logprob=c.mean_logprob,
                info={"choice": c.index},
            )
            for c in result.choices
        ]

    async def __call__(
        self, messages: Sequence[Message], tools: list[dict[str, Any]]
    ) -> PolicyStep:
        return (await self.sample(messages, tools, 1))[0]


USER_PROMPT = """You are role-playing the USER of a conversation with an AI assistant that \
can use tools. In the messages below, the 'user' messages are yours and the 'assistant' \
messages are the assistant's. Write only the user's next message: reveal your needs one turn \
at a time, answer the assistant's questions, never mention tools or functions, and when every \
need is met reply exactly {stop}.{persona}

Your needs, turn by turn:
{outline}"""


class LLMUser:
    """A role as the episode's user (see the module docstring)."""

    def __init__(
        self,
        ctx: Context,
        role: str,
        *,
        task: GroundTruth | None,
        seed: int,
        outline: list[dict[str, Any]] | None = None,
        persona: str | None = None,
        stop_token: str = "###STOP###",
        max_turns: int = 12,
    ) -> None:
        self.client = ctx.llm(role)
        self.role = role
        self.task = task
        self.seed = seed
        self.outline = outline or []
        self.persona = persona
        self.stop_token = stop_token
        self.max_turns = max_turns
        self._task_json = sim_task(task) if task is not None else None

    async def __call__(self, messages: Sequence[Message], event: UserEvent) -> str | None:
        if event.kind == "answered" and event.turn + 1 >= self.max_turns:
            return None
        agent_side = [m for m in messages if m.role in ("user", "assistant") and m.content]
        needs = "\n".join(
            f"{t.get('turn', i + 1)}. [{t.get('type', 'tool_call')}] {t.get('need', '')}"
            for i, t in enumerate(self.outline)
        )
        system = USER_PROMPT.format(
            stop=self.stop_token,
            persona=f" You are a {self.persona}." if self.persona else "",
            outline=needs or "(as in the conversation so far)",
        )
        meta = None
        if self.task is not None:
            meta = {"role": self.role, "ground_truth": self._task_json}
            if self.persona:
                meta["persona"] = self.persona
            meta["stop_token"] = self.stop_token
        result = await self.client.chat(
            [Message(role="system", content=system), *agent_side],
            None,
            seed=self.seed,
            metadata=meta,
        )
        if not result.ok:
            result.raise_for_infra()
            raise PolicyError(result.error or "the user simulator returned nothing")
        text = (result.choices[0].message.content or "").strip()
        if not text or self.stop_token in text:
            return None
        return text


EDGE_PROMPT = """You check a tool dependency graph. Answer with JSON only: \
{"related": "yes" or "no", "reason": "<one sentence>"}. Answer "yes" when the OUTPUT of the \
source tool can provide a value for an INPUT of the target tool in a realistic workflow."""


def edge_judge(ctx: Context, role: str = "judge", *, seed: int = 0) -> Any:
    """Magnet's LLM edge check as a :data:`~trajsynth.graph.signature.EdgeJudge`: one judge
    request per function pair; an unreadable answer keeps the edge (the types already agree);
    checks lost to the endpoint raise :class:`~trajsynth.core.errors.InfraError` once all
    are asked (see the module docstring)."""

    def ask(questions: Sequence[EdgeQuestion]) -> list[bool]:
        client = ctx.llm(role)
        lost: list[str] = []

        async def one(q: EdgeQuestion) -> bool:
            src = {"name": q.source.name, "description": q.source.description,
                   "response": q.source.response}  # fmt: skip
            dst = {"name": q.target.name, "description": q.target.description,
                   "parameters": q.target.parameters}  # fmt: skip
            links = [f"{f.field} -> {f.param}" for f in q.feeds]
            prompt = (
                f"Source tool: {json.dumps(src, ensure_ascii=False)}\n"
                f"Target tool: {json.dumps(dst, ensure_ascii=False)}\n"
                f"Candidate links (output field -> input parameter): {links}"
            )
            result = await client.chat(
                [Message(role="system", content=EDGE_PROMPT), Message(role="user", content=prompt)],
                None,
                temperature=0.0,
                seed=seed,
                metadata={
                    "role": role,
                    "mode": "edge",
                    "source_tool": q.source.to_openai()["function"]
                    | {"response": q.source.response},
                    "target_tool": q.target.to_openai()["function"],
                },
            )
            if result.infra:  # no verdict: the edge is not kept as if the judge had said yes
                lost.append(result.error or "the endpoint failed")
                return True
            if not result.ok:
                ctx.metrics.inc("edge_judge.request_failed")
                return True
            text = result.choices[0].message.content or ""
            try:
                verdict = json.loads(text[text.find("{") : text.rfind("}") + 1])
                return str(verdict.get("related", "yes")).strip().lower() != "no"
            except (ValueError, AttributeError):
                ctx.metrics.inc("edge_judge.unreadable")
                return "no" not in text.lower()[:10]

        verdicts = ctx.gather((one(q) for q in questions), limit=64)
        ctx.metrics.inc("infra.units", len(questions))
        if lost:
            error = InfraError(
                f"{len(lost)} of {len(questions)} edge checks (role {role}) got no answer "
                f"from the endpoint, so the graph cannot be built; last error: {lost[-1]}"
            )
            ctx.lost_to_infra(error, len(lost), unit="edge checks")
            raise error
        return verdicts

    return ask
