"""Multi-turn episodes: a policy plays a task's user turns against a real environment.

Every generation method (rejection sampling, director-actor, TSR, Magnet pairs, HardGen)
and the trainer (evaluation, GCP's probe, GRPO rollouts: :mod:`trajsynth.train.rollout`)
play tasks through this one runner, with the same gold user. It imports no LLM code: the
policy and the user are protocols, and adapters (stage-side for roles, train-side for
checkpoints and endpoints) turn a model into either.

- **policy**: ``async policy(messages, tools) -> PolicyStep | Message``: the next assistant
  message for the conversation so far;
- **user**: ``async user(messages, event) -> str | None``: the next user message, or None to
  end. :class:`GoldUser` (the default) reveals the task's gold turns: the first request,
  the gold clarification when the assistant asks on a ``clarify`` turn, a nudge when it asks
  needlessly, the next turn's request after a final answer, and None after the last turn.

One episode (:func:`run_episode`, or :class:`Episode` step by step for search methods):

1) reset the environment to the task (its seed and initial state); the conversation starts
   from ``prefix`` (e.g. a task row's system prompt and first request; assistant calls in a
   prefix are replayed so the state matches) or from the system prompt and the user's
   opening message;
2) ask the policy for a message; record its format errors (what the parser could not read);
3) a message with calls: ``env.step`` runs them in order and one tool message per call is
   appended. A result whose error is a schema category (unknown tool, malformed arguments,
   missing or mistyped parameters...) is also a format error; every error result is recorded
   in ``tool_errors``. A terminal tool, or the environment's own step limit, ends the episode;
4) a message without calls ends the assistant's part of the turn: a question (text ending in
   '?') goes to the user as a ``question`` event, at most ``max_followups`` times per turn; a
   final answer goes as ``answered``, and the user's reply opens the next turn. The user's
   None ends the episode;
5) ``max_steps_per_turn`` assistant messages in one turn, or ``max_steps`` in all, end the
   episode (``end = "max_steps"``); ``stop_after_turn`` ends it once that turn is answered;
   a message whose generation hit its length limit (``PolicyStep.closed`` False) ends it
   before its calls run (``end = "length"``);
6) the result: messages, format errors, tool errors, assistant steps, turns reached, the
   final state hash, and per-step records (calls, errors, state hash before the step, the
   parser's errors, log-probability when the policy reports one).

Token in / token out (an option, for training): with a ``renderer`` (the chat template of
the model that plays, :class:`TokenRenderer`) the episode keeps the token sequence the model
sees and writes. The first prompt is the rendering of the opening messages; after each
assistant step only the ids of the messages that follow it (tool results, the user's reply,
the next generation prompt) are appended, so what the model generated is never
re-tokenized. The policy is asked with ``prompt_ids=`` (it must generate from exactly those
ids) and returns the ids it generated (and their log-probabilities, when asked). The
sequence is capped at ``EpisodeLimits.max_tokens``: a generation cut there, or a prompt that
would pass it, ends the episode (``end = "length"``). The result holds, per assistant step,
the prompt ids, the generated ids and their log-probabilities (:class:`TokenStep`), and the
whole sequence with its loss mask (1 = generated) and the step each generated token belongs
to.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from ..core.schema import Message
from ..core.task import GoldTurn, GroundTruth
from .base import Environment, EnvSnapshot, ToolResult
from .verifiers.schema import SCHEMA_CATEGORIES

__all__ = [
    "NUDGE",
    "Episode",
    "EpisodeLimits",
    "EpisodeResult",
    "GoldUser",
    "Policy",
    "PolicyStep",
    "TokenRenderer",
    "TokenStep",
    "User",
    "UserEvent",
    "is_question",
    "play",
    "run_episode",
    "turn_starts",
]

#: what the gold user says when the assistant asks a question the task does not expect
NUDGE = "Everything you need is in my request; please go ahead."


@dataclass
class PolicyStep:
    """One assistant message as a policy produced it."""

    message: Message
    format_errors: list[str] = field(default_factory=list)
    logprob: float | None = None  # mean token log-probability, when the backend reports it
    info: dict[str, Any] = field(default_factory=dict)
    closed: bool = True  # False: the generation stopped at its length limit
    token_ids: list[int] | None = None  # the ids generated, as generated (token level)
    token_logprobs: list[float] | None = None  # one per generated token, when asked


class Policy(Protocol):
    """``await policy(messages, tools)`` → the next assistant message; when the episode
    records tokens it is called with ``prompt_ids=`` as well (module docstring)."""

    def __call__(
        self, messages: Sequence[Message], tools: list[dict[str, Any]]
    ) -> Awaitable[PolicyStep | Message]: ...


class TokenRenderer(Protocol):
    """The chat template of the model that plays, as token ids."""

    def prompt_ids(self, messages: Sequence[Message], tools: list[dict[str, Any]]) -> list[int]:
        """The conversation and the generation prompt."""
        ...

    def continuation_ids(
        self, history: Sequence[Message], new: Sequence[Message], tools: list[dict[str, Any]]
    ) -> list[int]:
        """What follows ``history`` (ending with an assistant message, its end-of-turn token
        included) when ``new`` messages come after it, up to the next generation prompt."""
        ...


@dataclass(frozen=True)
class TokenStep:
    """One assistant step at the token level."""

    prompt_ids: list[int] | None  # what the model was given (None: tokens not recorded)
    token_ids: list[int] | None  # what it generated (cut at the episode's token budget)
    logprobs: list[float] | None  # one per generated token, when the policy reports them


@dataclass(frozen=True)
class UserEvent:
    """Why the user is asked to speak."""

    kind: Literal["open", "question", "answered"]
    turn: int  # the turn the conversation is in (for "answered": the one just finished)
    gold: GoldTurn | None  # that turn's gold, when the task has it
    followups: int = 0  # questions already answered in this turn


User = Callable[[Sequence[Message], UserEvent], Awaitable[str | None]]


def is_question(text: str | None) -> bool:
    """A text reply that asks the user something (ends with '?')."""
    return bool(text and text.strip().endswith("?"))


def turn_starts(messages: Sequence[Message]) -> list[int]:
    """Index of the user message that opens each turn (a user message answering an assistant
    question stays in its turn).

    >>> m = [Message(role="user", content="Book it"), Message(role="assistant", content="Which?"),
    ...      Message(role="user", content="SW101"), Message(role="assistant", content="Done."),
    ...      Message(role="user", content="Thanks, now a hotel")]
    >>> turn_starts(m)
    [0, 4]
    """
    starts: list[int] = []
    asked = False
    for i, m in enumerate(messages):
        if m.role == "user":
            if not starts or not asked:
                starts.append(i)
            asked = False
        elif m.role == "assistant":
            asked = not m.tool_calls and is_question(m.content)
    return starts


class GoldUser:
    """The default user: reveals the task's gold turns in order (module docstring)."""

    def __init__(self, task: GroundTruth, *, nudge: str = NUDGE) -> None:
        self.task = task
        self.nudge = nudge

    async def __call__(self, messages: Sequence[Message], event: UserEvent) -> str | None:
        turns = self.task.turns
        if event.kind == "open":
            return turns[0].request if turns else None
        if event.kind == "question":
            g = event.gold
            if g is not None and g.kind == "clarify" and event.followups == 0:
                return g.clarification or "Never mind that; let's leave it there."
            return self.nudge
        nxt = event.turn + 1
        return turns[nxt].request if nxt < len(turns) else None


@dataclass(frozen=True)
class EpisodeLimits:
    max_steps: int = 32  # assistant messages in the whole episode
    max_steps_per_turn: int = 12
    max_followups: int = 2  # questions the user answers per turn
    max_tokens: int | None = None  # the token sequence, when tokens are recorded


@dataclass
class EpisodeResult:
    """What an episode produced (step 6)."""

    messages: list[Message]
    format_errors: list[str]
    tool_errors: list[dict[str, Any]]
    steps: int
    turns: int
    final_state_hash: str
    end: str  # done | user_stop | max_steps | terminal | truncated | length
    step_info: list[dict[str, Any]]
    results: list[ToolResult]
    token_steps: list[TokenStep] = field(default_factory=list)  # one per assistant step
    token_ids: list[int] = field(default_factory=list)  # the whole sequence (token level)
    mask: list[int] = field(default_factory=list)  # 1 = generated by the policy
    step_of_token: list[int] = field(default_factory=list)  # assistant step, -1 otherwise

    @property
    def calls(self) -> list[Any]:
        return [c for m in self.messages if m.role == "assistant" for c in m.tool_calls]


@dataclass
class _State:
    messages: list[Message]
    format_errors: list[str]
    tool_errors: list[dict[str, Any]]
    step_info: list[dict[str, Any]]
    results: list[ToolResult]
    turn: int = 0
    steps: int = 0
    turn_steps: int = 0
    followups: int = 0
    end: str | None = None
    token_steps: list[TokenStep] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    step_of_token: list[int] = field(default_factory=list)
    covered: int = 0  # messages the token sequence renders

    def copy(self) -> _State:
        return _State(
            list(self.messages),
            list(self.format_errors),
            list(self.tool_errors),
            list(self.step_info),
            list(self.results),
            self.turn,
            self.steps,
            self.turn_steps,
            self.followups,
            self.end,
            list(self.token_steps),
            list(self.token_ids),
            list(self.mask),
            list(self.step_of_token),
            self.covered,
        )


@dataclass(frozen=True)
class EpisodeSnapshot:
    """An episode at one moment: its conversation state and the environment's snapshot."""

    state: _State
    env: EnvSnapshot


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class Episode:
    """One episode, advanced one assistant message at a time (steps 1-6)."""

    def __init__(
        self,
        task: GroundTruth,
        env: Environment,
        *,
        tools: list[dict[str, Any]],
        system: str | None = None,
        prefix: Sequence[Message] | None = None,
        user: User | None = None,
        limits: EpisodeLimits | None = None,
        stop_after_turn: int | None = None,
        renderer: TokenRenderer | None = None,
    ) -> None:
        self.task = task
        self.env = env
        self.tools = tools
        self.system = system
        self.prefix = list(prefix or [])
        self.user: User = user or GoldUser(task)
        self.limits = limits or EpisodeLimits()
        self.stop_after_turn = stop_after_turn
        self.renderer = renderer
        self.s = _State([], [], [], [], [])

    # -- 1) start ------------------------------------------------------------------------------
    async def start(self) -> None:
        self.env.reset(self.task)
        s = self.s = _State([], [], [], [], [])
        if self.prefix:
            s.messages = list(self.prefix)
            self._replay_prefix()
            if s.messages[-1].role != "user":
                raise ValueError("an episode prefix must end with a user message")
            return
        if self.system:
            s.messages.append(Message(role="system", content=self.system))
        opening = await self.user(s.messages, UserEvent("open", 0, self._gold(0)))
        if opening is None:
            s.end = "user_stop"
            return
        s.messages.append(Message(role="user", content=opening))

    def _replay_prefix(self) -> None:
        """Prefix calls are replayed so the state matches; the turn is counted as the user
        would count it (a reply to a question stays in its turn)."""
        s = self.s
        turn, asked, seen_user = 0, False, False
        for m in s.messages:
            if m.role == "user":
                if seen_user and not asked:
                    turn += 1
                    s.turn_steps = s.followups = 0
                elif asked:
                    s.followups += 1
                seen_user, asked = True, False
            elif m.role == "assistant":
                s.steps += 1
                s.turn_steps += 1
                if m.tool_calls:
                    self.env.step(m)
                    asked = False
                else:
                    asked = is_question(m.content)
        s.turn = turn

    def _gold(self, turn: int) -> GoldTurn | None:
        turns = self.task.turns
        return turns[turn] if 0 <= turn < len(turns) else None

    # -- queries ---------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.s.end is not None

    @property
    def messages(self) -> list[Message]:
        return self.s.messages

    @property
    def turn(self) -> int:
        return self.s.turn

    def snapshot(self) -> EpisodeSnapshot:
        return EpisodeSnapshot(self.s.copy(), self.env.snapshot())

    def restore(self, snap: EpisodeSnapshot) -> None:
        self.s = snap.state.copy()
        self.env.restore(snap.env)

    # -- token in / token out ------------------------------------------------------------
    def next_prompt(self) -> list[int] | None:
        """With a renderer: the prompt ids of the next assistant step (the sequence so far
        plus the ids of the messages since the last step); None without one, or when the
        prompt would pass ``max_tokens`` (which ends the episode)."""
        s = self.s
        if self.renderer is None or s.end is not None:
            return None
        if not s.token_ids:
            more = self.renderer.prompt_ids(s.messages, self.tools)
        elif len(s.messages) > s.covered:
            more = self.renderer.continuation_ids(
                s.messages[: s.covered], s.messages[s.covered :], self.tools
            )
        else:
            more = []
        budget = self.limits.max_tokens
        if budget is not None and len(s.token_ids) + len(more) >= budget:
            s.end = "length"
            return None
        s.token_ids += more
        s.mask += [0] * len(more)
        s.step_of_token += [-1] * len(more)
        s.covered = len(s.messages)
        return list(s.token_ids)

    def _record_tokens(self, step: PolicyStep, index: int) -> bool:
        """The step's tokens (module docstring); False when the budget cut them."""
        s = self.s
        if self.renderer is None:
            s.token_steps.append(TokenStep(None, step.token_ids, step.token_logprobs))
            return True
        if step.token_ids is None:
            raise ValueError("a policy playing token in / token out must return token_ids")
        budget = self.limits.max_tokens
        room = len(step.token_ids) if budget is None else max(0, budget - len(s.token_ids))
        ids = step.token_ids[:room]
        lps = step.token_logprobs[: len(ids)] if step.token_logprobs is not None else None
        s.token_steps.append(TokenStep(list(s.token_ids), ids, lps))
        s.token_ids += ids
        s.mask += [1] * len(ids)
        s.step_of_token += [index] * len(ids)
        s.covered = len(s.messages)
        return len(ids) == len(step.token_ids)

    # -- 2-5) one assistant message ----------------------------------------------------------
    async def advance(self, reply: PolicyStep | Message) -> None:
        s = self.s
        if s.end is not None:
            raise RuntimeError("the episode has ended")
        step = reply if isinstance(reply, PolicyStep) else PolicyStep(message=reply)
        msg = step.message
        index = s.steps
        s.format_errors += [f"step {index}: {e}" for e in step.format_errors]  # 2)
        info: dict[str, Any] = {
            "turn": s.turn,
            "state_hash_before": self.env.state_hash(),
            "calls": len(msg.tool_calls),
            "errors": [],
        }
        if step.logprob is not None:
            info["logprob"] = step.logprob
        if step.format_errors:
            info["parse_errors"] = list(step.format_errors)
        s.messages.append(msg)
        s.steps += 1
        s.turn_steps += 1
        whole = self._record_tokens(step, index)
        if not (whole and step.closed):  # a cut message: its calls are not run
            s.step_info.append(info)
            s.end = "length"
            return
        info["state_diff"] = "[]"  # what the step changed in the environment (JSON text)
        if msg.tool_calls:  # 3)
            before = self.env.snapshot()
            obs, done, env_info = self.env.step(msg)
            info["state_diff"] = json.dumps(
                self.env.diff(before).to_json(), ensure_ascii=False, sort_keys=True, default=str
            )
            s.messages += obs.to_messages(self.env.max_observation_chars)
            for r in obs.results:
                s.results.append(r)
                if r.error is None:
                    continue
                err = {"step": index, "call": r.call_id, "name": r.name, **r.error}
                s.tool_errors.append(err)
                info["errors"].append(r.error.get("type"))
                if r.error.get("type") in SCHEMA_CATEGORIES:
                    s.format_errors.append(
                        f"step {index}: {r.error['type']}: {r.error.get('message', '')}"
                    )
            s.step_info.append(info)
            if done:
                s.end = "truncated" if env_info.get("truncated") else "terminal"
            elif s.turn_steps >= self.limits.max_steps_per_turn or s.steps >= self.limits.max_steps:
                s.end = "max_steps"  # 5)
            return
        s.step_info.append(info)
        # 4) text: a question or a final answer
        asked = is_question(msg.content) and s.followups < self.limits.max_followups
        if not asked and self.stop_after_turn is not None and s.turn >= self.stop_after_turn:
            s.end = "done"
            return
        event = UserEvent(
            "question" if asked else "answered", s.turn, self._gold(s.turn), s.followups
        )
        text = await _maybe_await(self.user(s.messages, event))
        if text is None:
            s.end = "done" if not asked else "user_stop"
            return
        s.messages.append(Message(role="user", content=text))
        if asked:
            s.followups += 1
        else:
            s.turn += 1
            s.turn_steps = s.followups = 0
        if s.steps >= self.limits.max_steps:
            s.end = "max_steps"

    # -- 6) the result ---------------------------------------------------------------------
    def result(self) -> EpisodeResult:
        s = self.s
        return EpisodeResult(
            messages=list(s.messages),
            format_errors=list(s.format_errors),
            tool_errors=list(s.tool_errors),
            steps=s.steps,
            turns=s.turn + (1 if s.messages else 0),
            final_state_hash=self.env.state_hash(),
            end=s.end or "running",
            step_info=list(s.step_info),
            results=list(s.results),
            token_steps=list(s.token_steps),
            token_ids=list(s.token_ids),
            mask=list(s.mask),
            step_of_token=list(s.step_of_token),
        )


async def play(
    ep: Episode,
    policy: Policy | Callable[..., Any],
    *,
    first: PolicyStep | Message | None = None,
) -> EpisodeResult:
    """Start ``ep`` and ask ``policy`` for messages until it ends (steps 1-6); with a
    renderer the policy is given the prompt ids of each step. ``first``: the first assistant
    message, already in hand (e.g. sampled once for several rollouts of a task), advanced
    before the policy is asked for more."""
    await ep.start()
    if first is not None and not ep.done:
        ep.next_prompt()
        if not ep.done:
            await ep.advance(first)
    # when the episode records tokens, the policy takes prompt_ids= too (module docstring),
    # which the Policy protocol does not state
    ask: Callable[..., Any] = policy
    while not ep.done:
        ids = ep.next_prompt()
        if ep.done:
            break
        if ids is None:
            reply = await _maybe_await(ask(ep.messages, ep.tools))
        else:
            reply = await _maybe_await(ask(ep.messages, ep.tools, prompt_ids=ids))
        await ep.advance(reply)
    return ep.result()


async def run_episode(
    task: GroundTruth,
    env: Environment,
    policy: Policy | Callable[..., Any],
    *,
    tools: list[dict[str, Any]],
    system: str | None = None,
    prefix: Sequence[Message] | None = None,
    user: User | None = None,
    limits: EpisodeLimits | None = None,
    stop_after_turn: int | None = None,
    renderer: TokenRenderer | None = None,
) -> EpisodeResult:
    """Play ``task`` with ``policy`` in ``env`` until the episode ends (steps 1-6)."""
    ep = Episode(
        task,
        env,
        tools=tools,
        system=system,
        prefix=prefix,
        user=user,
        limits=limits,
        stop_after_turn=stop_after_turn,
        renderer=renderer,
    )
    return await play(ep, policy)
