"""The simulated actor (teacher/policy) and the simulated user: both play a task whose ground
truth is known, one from each side of the conversation.

The actor, for one request:

1. reads the conversation (:func:`read_conversation`): which gold turn it is in, how many
   assistant steps of that turn are done, whether a question it asked was answered, what the
   tools returned;
2. draws the turn's plan with the skill profile — at most one structural error (stopping
   early, a missing dependent call, a wrong order) plus, independently, a needless
   clarification question; on a clarify turn, skipping the clarification; on a no-tool turn,
   a spurious call — keyed by (seed, task, turn), so every step of one rollout sees the same
   plan, whatever prefix it continues from;
3. plays the next step of that plan: each call with at most one call-level error (dropped
   optional argument, wrong value, wrong tool, malformed JSON, hallucinated name), keyed by
   (seed, task, turn, step, call); or, when the plan is done, a final answer built only from
   what the tools actually returned.

The user simulator opens with turn 0's request, answers a clarification question with the
turn's ``clarification``, moves to the next turn after a final answer, and says its stop
token after the last one (APIGen-MT / τ-bench style: the goal is revealed turn by turn).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...core.ids import seed_from
from ...core.task import GoldCall, GoldTurn, GroundTruth
from .contracts import ActorMeta, SimConfig, SkillProfile, UserMeta
from .phrasing import PERSONA_OPENERS, call_thought, lower_first, thought
from .text import ToolIndex, default_args, hallucinate_name, perturb_value

__all__ = ["ConversationState", "SimOutput", "act", "read_conversation", "user_reply"]


@dataclass
class SimOutput:
    """What a simulated role produced for one choice."""

    content: str | None = None
    reasoning: str | None = None
    calls: list[tuple[str, str]] = field(default_factory=list)  # (name, arguments text)
    uncertain: bool = False  # an error was injected: lower token log-probabilities
    trace: list[str] = field(default_factory=list)  # errors injected, e.g. "wrong_tool@t0s1c0"


@dataclass
class ConversationState:
    """Where an agent-side conversation stands."""

    turn: int = -1  # index of the current user turn (-1: no user message yet)
    followups: int = 0  # user messages answering the assistant's questions in this turn
    steps_done: int = 0  # assistant messages with calls in this turn
    asked: bool = False  # the last assistant message asked a question
    answered: bool = False  # the assistant gave a final (non-question) answer in this turn
    results: list[str] = field(default_factory=list)  # tool outputs in this turn
    all_results: list[str] = field(default_factory=list)
    last_role: str | None = None


def _is_question(text: str | None) -> bool:
    return bool(text and text.strip().endswith("?"))


def read_conversation(messages: list[dict[str, Any]]) -> ConversationState:
    """Segment ``messages`` into user turns.

    A user message that follows an assistant question (text ending in '?', no calls) answers
    it and stays in the same turn; any other user message starts a new turn.
    """
    st = ConversationState()
    for m in messages:
        role = m.get("role")
        if role == "system":
            continue
        st.last_role = role
        if role == "user":
            if st.asked and st.turn >= 0:
                st.followups += 1
            else:
                st.turn += 1
                st.followups = st.steps_done = 0
                st.answered = False
                st.results = []
            st.asked = False
        elif role == "assistant":
            if m.get("tool_calls"):
                st.steps_done += 1
                st.asked = False
            else:
                st.asked = _is_question(m.get("content"))
                st.answered = not st.asked
        elif role == "tool":
            text = m.get("content")
            text = text if isinstance(text, str) else json.dumps(text)
            st.results.append(text)
            st.all_results.append(text)
    return st


def _categorical(u: float, options: list[tuple[str, float]]) -> str | None:
    """The option whose probability interval holds ``u`` (None: no error)."""
    acc = 0.0
    for kind, p in options:
        acc += p
        if u < acc:
            return kind
    return None


def _args_text(args: dict[str, Any]) -> str:
    return json.dumps(args, ensure_ascii=False)


class _Actor:
    def __init__(
        self,
        meta: ActorMeta,
        messages: list[dict[str, Any]],
        tools: list | None,
        cfg: SimConfig,
        key: list[Any],
    ) -> None:
        self.meta = meta
        self.gt: GroundTruth = meta.ground_truth
        self.tools = ToolIndex(tools)
        self.st = read_conversation(messages)
        self.said = " ".join(
            m["content"]
            for m in messages
            if m.get("role") == "user" and isinstance(m.get("content"), str)
        )
        self.cfg = cfg
        profile: SkillProfile = meta.profile or cfg.profile
        self.profile = profile.scaled(profile.hint_error_scale) if meta.hint else profile
        self.key = key
        self.out = SimOutput()

    def rng(self, *parts: Any) -> random.Random:
        return random.Random(seed_from(*self.key, *parts))

    def think_of(self, kind: str, *parts: Any, **fields: str) -> None:
        """A reasoning line of ``kind`` (see :func:`.phrasing.thought`), worded per step."""
        if self.cfg.think:
            self.out.reasoning = thought(kind, self.rng("think", kind, *parts), **fields)

    # -- the step --------------------------------------------------------------------------
    def run(self) -> SimOutput:
        turns = self.gt.turns
        t = self.meta.turn if self.meta.turn is not None else max(self.st.turn, 0)
        if t >= len(turns):
            self.think_of("done", t)
            self.out.content = "Everything you asked for is done."
            return self.out
        g = turns[t]
        if g.kind == "no_tool":
            return self.no_tool_turn(t, g)
        if g.kind == "clarify" and self.st.followups == 0:
            return self.clarify_turn(t, g)
        return self.tool_turn(t, g, allow_clarification=self.st.followups == 0)

    def no_tool_turn(self, t: int, g: GoldTurn) -> SimOutput:
        rr = self.rng("spurious", t)
        spurious = rr.random() < self.profile.spurious_call and self.tools.names
        if spurious and self.st.steps_done == 0:
            return self.spurious_call(t, rr, "spurious_call")
        self.think_of("no_tool", t)
        self.out.content = self._no_question(
            g.answer or "Happy to help with that: " + _gist(g.request)
        )
        return self.out

    def spurious_call(self, t: int, rr: random.Random, error: str) -> SimOutput:
        """A call to one of the offered functions on a turn that wants none (``error``)."""
        name = rr.choice(self.tools.names)
        info = self.tools.get(name)
        assert info is not None
        self.out.calls = [(name, _args_text(default_args(info, rr)))]
        self.out.uncertain = True
        self.out.trace.append(f"{error}@t{t}")
        self.think_of("spurious", t, tool=name)
        return self.out

    def clarify_turn(self, t: int, g: GoldTurn) -> SimOutput:
        rr = self.rng("clarify", t)
        if rr.random() >= self.profile.skip_clarification:
            if self.st.steps_done == 0 and not self.st.asked:
                if not any(g.steps) and g.answer and not _is_question(g.answer):
                    # nothing to call (no function fits the request): decline as the gold
                    # answer does, never ask for a detail that would not help
                    self.think_of("no_tool", t)
                    self.out.content = self._no_question(g.answer)
                    return self.out
                param = self._clarified_param(g)
                self.think_of("ask", t)
                q = g.answer if _is_question(g.answer) else None
                self.out.content = q or (
                    f"Could you tell me which {param[1].replace('_', ' ')} you want me to use?"
                    if param
                    else "Could you give me the missing detail I need for this?"
                )
                return self.out
            return self.tool_turn(t, g, allow_clarification=False)
        if not any(g.steps) and self.tools.names and self.st.steps_done == 0:
            # nothing to guess (no function fits the request): missing that, a model calls
            # one of the offered functions anyway — never claims a task it did not do
            return self.spurious_call(t, rr, "skip_clarification")
        # skip_clarification: guess the missing value and act
        self.out.trace.append(f"skip_clarification@t{t}")
        param = self._clarified_param(g)
        steps = [[c.model_copy(deep=True) for c in step] for step in g.steps]
        if param is not None:
            s, c, k = param[0][0], param[0][1], param[1]
            call = steps[s][c]
            call.arguments = {**call.arguments, k: perturb_value(call.arguments[k], rr)}
        return self.play(t, g, steps, self.plan(t, steps), guessed=True)

    def _clarified_param(self, g: GoldTurn) -> tuple[tuple[int, int], str] | None:
        """The argument the clarification supplies (its value appears in the follow-up)."""
        first: tuple[tuple[int, int], str] | None = None
        for s, step in enumerate(g.steps):
            for c, call in enumerate(step):
                for k, v in call.arguments.items():
                    if first is None:
                        first = ((s, c), k)
                    if g.clarification and str(v) and str(v) in g.clarification:
                        return ((s, c), k)
        return first

    def tool_turn(self, t: int, g: GoldTurn, *, allow_clarification: bool) -> SimOutput:
        steps = self.meta.hint_steps if self.meta.hint_steps is not None else g.steps
        first_step = allow_clarification and self.st.steps_done == 0 and not self.st.asked
        # needless clarification: its own draw, independent of the plan's
        if first_step and self.rng("ask", t).random() < self.profile.needless_clarification:
            self.out.trace.append(f"needless_clarification@t{t}")
            self.out.uncertain = True
            self.think_of("unsure", t)
            self.out.content = "Before I start, could you confirm the details of your request?"
            return self.out
        return self.play(t, g, steps, self.plan(t, steps), guessed=False)

    def plan(self, t: int, steps: list[list[GoldCall]]) -> list[int]:
        """The order in which this rollout plays the turn's steps (one structural error at
        most, drawn per turn — the same draw before and after any clarification)."""
        n, p = len(steps), self.profile
        options: list[tuple[str, float]] = []
        swappable: list[int] = []
        if n >= 2:
            options += [
                ("stop_early", p.stop_early),
                ("missing_dependent_call", p.missing_dependent_call),
            ]
            swappable = [i for i in range(n - 1) if _canon(steps[i]) != _canon(steps[i + 1])]
            if swappable:
                options.append(("wrong_call_order", p.wrong_call_order))
        rr = self.rng("plan", t)
        kind = _categorical(rr.random(), options)
        plan = list(range(n))
        if kind == "stop_early":
            plan = plan[: rr.randint(1, n - 1)]
        elif kind == "missing_dependent_call":
            del plan[rr.randint(0, n - 2)]
        elif kind == "wrong_call_order":
            i = rr.choice(swappable)
            plan[i], plan[i + 1] = plan[i + 1], plan[i]
        if kind is not None:
            self.out.trace.append(f"{kind}@t{t}")
        return plan

    def play(
        self, t: int, g: GoldTurn, steps: list[list[GoldCall]], plan: list[int], *, guessed: bool
    ) -> SimOutput:
        done = self.st.steps_done
        if done >= len(plan):
            complete = len(plan) == len(steps) and not self.out.trace
            return self.final_answer(t, g, complete=complete and not guessed)
        s = plan[done]
        for c, call in enumerate(steps[s]):
            self.out.calls.append(self.one_call(t, s, c, call))
        if self.out.trace:
            self.out.uncertain = True
        if self.out.calls and self.cfg.think:
            self.out.reasoning = call_thought(
                [(name, _loads(args)) for name, args in self.out.calls],
                self.tools,
                self.rng("think", t, done),
                request=self.said,
                step=done,
                outputs=self.st.all_results,
            )
        return self.out

    def one_call(self, t: int, s: int, c: int, call: GoldCall) -> tuple[str, str]:
        p = self.profile
        args = dict(call.arguments)
        optional = self.tools.optional_args(call)
        others = [n for n in self.tools.names if n != call.name]
        options: list[tuple[str, float]] = []
        if optional:
            options.append(("drop_optional_param", p.drop_optional_param))
        if args:
            options.append(("wrong_argument_value", p.wrong_argument_value))
        if others:
            options.append(("wrong_tool", p.wrong_tool))
        options += [
            ("malformed_json", p.malformed_json),
            ("hallucinated_tool", p.hallucinated_tool),
        ]
        rr = self.rng("call", t, s, c)
        kind = _categorical(rr.random(), options)
        name = call.name
        text: str | None = None
        if kind == "drop_optional_param":
            del args[rr.choice(sorted(optional))]
        elif kind == "wrong_argument_value":
            k = rr.choice(sorted(args))
            args[k] = perturb_value(args[k], rr)
        elif kind == "wrong_tool":
            name = rr.choice(others)
        elif kind == "hallucinated_tool":
            name = hallucinate_name(call.name, set(self.tools.names), rr)
        elif kind == "malformed_json":
            good = _args_text(args)
            text = (
                good[:-1] + (", " if args else "") if rr.random() < 0.5 else good.replace('"', "'")
            )
            if text == good:  # no quotes to break (empty or numeric-only): drop the brace
                text = good[:-1]
        if kind is not None:
            self.out.trace.append(f"{kind}@t{t}s{s}c{c}")
        return name, text if text is not None else _args_text(args)

    def final_answer(self, t: int, g: GoldTurn, *, complete: bool) -> SimOutput:
        parts = []
        if complete and g.answer:
            parts.append(g.answer)
        elif self.st.results:
            parts.append(
                "Here is what I found: " + "; ".join(r[:200] for r in self.st.results[-3:])
            )
        else:
            parts.append("I have handled your request.")
        text = " ".join(parts)
        if t == len(self.gt.turns) - 1:
            for req in self.gt.required_outputs:
                if req not in text and any(req in r for r in self.st.all_results):
                    text += f" ({req})"
        self.think_of("answer", t, self.st.steps_done)
        self.out.content = self._no_question(text)
        return self.out

    @staticmethod
    def _no_question(text: str) -> str:
        """Final answers never end in '?', which would read as a clarification question."""
        text = text.rstrip()
        while text.endswith("?"):
            text = text[:-1].rstrip()
        return (text or "Done") + ("" if text.endswith((".", "!", ")")) else ".")


def _loads(text: str) -> dict[str, Any] | None:
    """Arguments as written, or None when they are not a JSON object."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _canon(step: list[GoldCall]) -> list[str]:
    return sorted(json.dumps([c.name, c.arguments], sort_keys=True) for c in step)


def _gist(text: str) -> str:
    text = text.strip().rstrip("?.!")
    return (text[:1].lower() + text[1:]) if text else "your question"


def act(
    meta: ActorMeta,
    messages: list[dict[str, Any]],
    tools: list | None,
    cfg: SimConfig,
    key: list[Any],
) -> SimOutput:
    """The actor's next step for this conversation (see the module docstring)."""
    return _Actor(meta, messages, tools, cfg, key).run()


def user_reply(
    meta: UserMeta,
    messages: list[dict[str, Any]],
    cfg: SimConfig,
    rng: Callable[..., random.Random],
) -> SimOutput:
    """The simulated user's next message (see the module docstring)."""
    turns = meta.ground_truth.turns
    st = read_conversation(messages)
    out = SimOutput()
    if not turns:
        out.content = meta.stop_token
        return out
    if st.turn < 0:
        opener = rng("open").choice(
            PERSONA_OPENERS.get(meta.persona or "")
            or ([f"As a {meta.persona}, "] if meta.persona else [""])
        )
        req = turns[0].request
        out.content = (opener + (lower_first(req) if opener else req)).strip()
        return out
    t = st.turn
    g = turns[t] if t < len(turns) else None
    if st.last_role == "assistant" and st.asked:
        if g is not None and g.kind == "clarify" and st.followups == 0:
            out.content = g.clarification or "Use whatever value is most common."
        else:
            lead = rng("restate").choice(
                [
                    "Everything you need is in my request — please go ahead: ",
                    "It's all in what I wrote, go ahead: ",
                    "Yes, just as I said: ",
                    "No changes, please do it: ",
                ]
            )
            out.content = lead + (g.request if g else "")
        return out
    if st.last_role == "assistant" and st.answered:
        if t + 1 < len(turns):
            out.content = turns[t + 1].request
        else:
            out.content = meta.stop_token
        return out
    out.content = "Please continue."
    return out
