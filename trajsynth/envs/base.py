"""The environment interface (docs/architecture.md, "Backends"): ``reset`` / ``step`` /
``format_observation``, plus the cheap ``snapshot`` / ``restore`` / ``state_hash`` / ``diff``
that search, repair and RL methods need.

An episode, as a rollout drives it::

    env = factory.make("travel", seed=gt.env_seed, initial_state=gt.initial_state)
    obs = env.reset(gt)                       # obs.text: the first user request
    while True:
        msg = policy(messages)                # an assistant Message
        obs, done, info = env.step(msg)       # runs msg.tool_calls, in order
        messages += [msg, *obs.to_messages()] # one tool message per call
        if done: break                        # a text answer, a terminal tool, or max_steps

Rules every environment keeps:

1) an action is the assistant's tool calls: a :class:`~trajsynth.core.Message`, a list of
   :class:`~trajsynth.core.ToolCall` (parallel calls run in order), one call, or text (the
   final answer, which ends the episode);
2) a tool error is an observation (``ToolResult.error = {"type", "message"}``), never an
   exception: unknown tool, malformed or schema-violating arguments (checked with
   :mod:`trajsynth.envs.verifiers.schema` before the tool runs), and the tool's own refusals;
3) deterministic given the task and seed: no clock, no global randomness;
4) ``snapshot()`` / ``restore()`` are O(number of tables) and ``state_hash()`` is O(1) and
   stable across processes (:mod:`trajsynth.envs.state`);
5) ``info`` after each step has ``step``, ``state_hash``, ``errors`` (categories) and
   ``truncated``.
"""

from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..core.ids import stable_id
from ..core.schema import Message, ToolCall, Trajectory
from ..core.task import GroundTruth
from ..core.text import clean_text
from .spec import Toolset
from .state import StateDiff

__all__ = [
    "Action",
    "EnvSnapshot",
    "Environment",
    "Observation",
    "StepResult",
    "ToolResult",
    "as_ground_truth",
    "parse_action",
]

log = logging.getLogger("trajsynth.envs")

Action = Message | Sequence[ToolCall] | ToolCall | dict[str, Any] | str


@dataclass(frozen=True)
class ToolResult:
    """What one call returned: ``output`` on success, ``error`` ({type, message}) on failure."""

    call_id: str
    name: str
    arguments: dict[str, Any] | None
    output: Any = None
    error: dict[str, str] | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def category(self) -> str | None:
        return None if self.error is None else self.error.get("type")

    def payload(self) -> Any:
        """The JSON value the model sees: the output, or ``{"error": {...}}``."""
        return self.output if self.error is None else {"error": self.error}

    def content(self, max_chars: int | None = None) -> str:
        """The tool message text: compact JSON (strings as they are), optionally clipped."""
        value = self.payload()
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        text = clean_text(text)  # tool output is outside text: no lone surrogates, no NUL
        if max_chars is not None and len(text) > max_chars:
            text = text[:max_chars] + f" … [{len(text) - max_chars} more characters]"
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "call_id": self.call_id,
            "name": self.name,
            "arguments": self.arguments,
            "output": self.output,
            "error": self.error,
        }


@dataclass(frozen=True)
class Observation:
    """What the environment shows after reset (the user's ``text``) or a step (``results``)."""

    results: tuple[ToolResult, ...] = ()
    text: str | None = None

    def to_messages(self, max_chars: int | None = None) -> list[Message]:
        """One ``role=tool`` message per call result, answering its ``tool_call_id``."""
        return [
            Message(role="tool", content=r.content(max_chars), tool_call_id=r.call_id, name=r.name)
            for r in self.results
        ]

    @property
    def errors(self) -> list[str]:
        return [r.category for r in self.results if r.category is not None]


class StepResult(NamedTuple):
    observation: Observation
    done: bool
    info: dict[str, Any]


@dataclass(frozen=True)
class EnvSnapshot:
    """An environment's full episode state: its state tables plus step bookkeeping."""

    state: Any
    steps: int
    done: bool
    extra: dict[str, Any] = field(default_factory=dict)


def as_ground_truth(task: GroundTruth | Trajectory | dict[str, Any] | None) -> GroundTruth | None:
    """The ground truth of a task given as GroundTruth, a task row or its JSON."""
    if task is None or isinstance(task, GroundTruth):
        return task
    if isinstance(task, Trajectory):
        return task.ground_truth
    return GroundTruth.model_validate(task)


def _call_from_dict(d: dict[str, Any], index: int) -> ToolCall:
    fn = d["function"] if isinstance(d.get("function"), dict) else d
    args = fn.get("arguments", "{}")
    if not isinstance(args, str):
        args = json.dumps(args, ensure_ascii=False)
    return ToolCall(
        id=str(d.get("id") or f"call_{index}"), name=str(fn.get("name", "")), arguments=args
    )


def parse_action(action: Action) -> tuple[list[ToolCall], str | None]:
    """Rule 1: (tool calls, text) from any accepted action form."""
    if isinstance(action, str):
        return [], action
    if isinstance(action, Message):
        return list(action.tool_calls), action.content if not action.tool_calls else None
    if isinstance(action, ToolCall):
        return [action], None
    if isinstance(action, dict):
        if "tool_calls" in action or action.get("role") == "assistant":
            calls = [_call_from_dict(c, i) for i, c in enumerate(action.get("tool_calls") or [])]
            return calls, None if calls else action.get("content")
        return [_call_from_dict(action, 0)], None
    calls = [c if isinstance(c, ToolCall) else _call_from_dict(c, i) for i, c in enumerate(action)]
    return calls, None


class Environment(ABC):
    """Base of every environment. Subclasses implement :meth:`_reset`, :meth:`_execute`,
    :meth:`_snapshot_state`, :meth:`_restore_state`, :meth:`state_hash`, :meth:`state`
    and :meth:`diff`; the episode bookkeeping (steps, done, info) lives here."""

    #: the domain (toolset) name
    domain: str = ""
    #: tools offered to the model
    toolset: Toolset

    def __init__(self, *, max_steps: int = 64, max_observation_chars: int | None = 16_000) -> None:
        self.max_steps = max_steps
        self.max_observation_chars = max_observation_chars
        self.steps = 0
        self.done = False
        self.task: GroundTruth | None = None

    # -- episode ----------------------------------------------------------------------------
    def reset(self, task: GroundTruth | Trajectory | dict[str, Any] | None = None) -> Observation:
        """Start an episode for ``task`` (its ``env_seed`` and ``initial_state`` apply)."""
        self.task = as_ground_truth(task)
        self.steps = 0
        self.done = False
        self._reset(self.task)
        first = self.task.turns[0].request if self.task and self.task.turns else None
        return Observation(text=first)

    def step(self, action: Action) -> StepResult:
        """Run the action's calls in order; a text action (no calls) ends the episode."""
        calls, text = parse_action(action)
        self.steps += 1
        results = tuple(self.execute(c) for c in calls)
        terminal = any(r.ok and self._is_terminal(r.name) for r in results)
        truncated = bool(calls) and self.steps >= self.max_steps and not terminal
        self.done = self.done or not calls or terminal or truncated
        obs = Observation(results=results, text=text)
        info = {
            "step": self.steps,
            "state_hash": self.state_hash(),
            "errors": obs.errors,
            "truncated": truncated,
        }
        return StepResult(obs, self.done, info)

    def execute(self, call: ToolCall) -> ToolResult:
        """Run one call; every failure comes back as an error result (rule 2)."""
        return self._execute(call)

    def call(
        self, tool: str, arguments: dict[str, Any] | None = None, /, **kwargs: Any
    ) -> ToolResult:
        """Run one call by tool name, with ``arguments`` and/or keyword arguments (task
        synthesis threads outputs into later inputs this way)."""
        args = {**(arguments or {}), **kwargs}
        call_id = "call_" + stable_id(tool, args, self.steps)[:12]
        return self.execute(
            ToolCall(id=call_id, name=tool, arguments=json.dumps(args, ensure_ascii=False))
        )

    def format_observation(self, obs: Observation | ToolResult) -> str:
        """The text a model sees: a result's content; several results, one per line."""
        if isinstance(obs, ToolResult):
            return obs.content(self.max_observation_chars)
        if not obs.results:
            return obs.text or ""
        if len(obs.results) == 1:
            return obs.results[0].content(self.max_observation_chars)
        return "\n".join(f"[{r.name}] {r.content(self.max_observation_chars)}" for r in obs.results)

    # -- snapshots --------------------------------------------------------------------------
    def snapshot(self) -> EnvSnapshot:
        """The episode as it is now; cheap (O(number of tables))."""
        return EnvSnapshot(
            state=self._snapshot_state(), steps=self.steps, done=self.done, extra=self._extra()
        )

    def restore(self, snap: EnvSnapshot) -> None:
        """Return to ``snap`` (which stays usable: branch from it as often as needed)."""
        self._restore_state(snap.state)
        self.steps = snap.steps
        self.done = snap.done
        self._restore_extra(snap.extra)

    # -- to implement -----------------------------------------------------------------------
    @abstractmethod
    def _reset(self, task: GroundTruth | None) -> None: ...

    @abstractmethod
    def _execute(self, call: ToolCall) -> ToolResult: ...

    @abstractmethod
    def _snapshot_state(self) -> Any: ...

    @abstractmethod
    def _restore_state(self, state: Any) -> None: ...

    @abstractmethod
    def state_hash(self) -> str:
        """Stable hash of the current state (equal states, equal hashes, in any process)."""

    @abstractmethod
    def state(self) -> dict[str, Any]:
        """The current state as JSON."""

    @abstractmethod
    def diff(self, a: EnvSnapshot, b: EnvSnapshot | None = None) -> StateDiff:
        """What changed from snapshot ``a`` to ``b`` (default: the current state)."""

    def value_hints(self) -> dict[str, Any] | None:
        """What task synthesis may draw argument values from besides :meth:`state`, found by
        running the tools (:class:`trajsynth.envs.values.Known` as JSON: folders, files,
        values by noun, tables), or None: the state says it all (the default). An
        environment that gives hints also has its accepted values learned as tasks are
        made."""
        return None

    def _is_terminal(self, name: str) -> bool:
        return False

    def _extra(self) -> dict[str, Any]:
        return {}

    def _restore_extra(self, extra: dict[str, Any]) -> None:
        return None

    def close(self) -> None:
        """Release resources (sandboxes); the environment is unusable afterwards."""
