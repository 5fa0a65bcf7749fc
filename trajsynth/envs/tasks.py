"""Hand-written example tasks of the built-in domains, as executable ground truth.

Each domain ships a handful of tasks, written with the helpers below, that together exercise
every capability tag (``single_call``, ``parallel_calls``, ``dependent_calls``,
``optional_params``, ``needs_clarification``, ``no_tool_needed``, ``error_recovery``,
``long_horizon``). Later stages use them as seeds and probes; tests execute all of them.

Authoring: a value that a gold call takes from an earlier call's output is written as a
reference, ``ref("c0.flights[0].flight_id")`` (``c<i>`` = the i-th gold call of the task,
counting across turns and steps). A reference inside a longer string is interpolated
(``"Booking {{c2.booking_id}} is confirmed"``).

:func:`materialize` turns an authored task into an :class:`ExampleTask`:

1) reset a fresh environment with the task's seed and initial state;
2) run the gold calls turn by turn, step by step, resolving references from the outputs so
   far; record each output on its :class:`~trajsynth.core.GoldCall` and each reference in
   ``ground_truth.extra["bindings"]`` (``{"call", "param", "from_call", "path"}``: the data
   flow the function-signature graph is built on);
3) a failing call is an authoring error unless marked ``expect_error`` (error-recovery steps;
   listed in ``extra["expected_errors"]``);
4) resolve references in requests, answers and required outputs; store the final
   ``state_hash`` as ``final_state_hash``.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..core.ids import stable_id
from ..core.schema import CAPABILITIES, Trajectory
from ..core.task import GoldCall, GoldTurn, GroundTruth
from .spec import Toolset

__all__ = [
    "AuthoredCall",
    "AuthoredTask",
    "AuthoredTurn",
    "ExampleTask",
    "call",
    "materialize",
    "ref",
    "task",
    "turn",
]

_REF = re.compile(r"\{\{\s*c(\d+)((?:\.[A-Za-z_][A-Za-z0-9_]*|\[\d+\])*)\s*\}\}")


def ref(path: str) -> str:
    """A reference to an earlier call's output, e.g. ``ref("c0.flights[0].flight_id")``."""
    return "{{" + path + "}}"


class AuthoredCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    acceptable: dict[str, list[Any]] | None = None
    expect_error: str | None = Field(
        default=None, description="The error category this call is meant to hit, if any."
    )


class AuthoredTurn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    request: str
    kind: Literal["tool", "no_tool", "clarify"] = "tool"
    steps: list[list[AuthoredCall]] = Field(default_factory=list)
    answer: str | None = None
    clarification: str | None = None


class AuthoredTask(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task_id: str
    capabilities: list[str]
    turns: list[AuthoredTurn]
    required_outputs: list[str] = Field(default_factory=list)
    env_seed: int = 0
    initial_state: dict[str, Any] | None = None
    note: str = ""


def call(
    name: str,
    /,
    *,
    acceptable: dict[str, list[Any]] | None = None,
    expect_error: str | None = None,
    **arguments: Any,
) -> AuthoredCall:
    """One gold call (``acceptable``: BFCL-style alternatives per parameter)."""
    return AuthoredCall(
        name=name, arguments=arguments, acceptable=acceptable, expect_error=expect_error
    )


def turn(
    request: str,
    *steps: list[AuthoredCall] | AuthoredCall,
    kind: Literal["tool", "no_tool", "clarify"] = "tool",
    answer: str | None = None,
    clarification: str | None = None,
) -> AuthoredTurn:
    """One user turn; each positional step is a call or a list of parallel calls."""
    return AuthoredTurn(
        request=request,
        kind=kind,
        steps=[s if isinstance(s, list) else [s] for s in steps],
        answer=answer,
        clarification=clarification,
    )


def task(
    task_id: str,
    capabilities: list[str],
    *turns: AuthoredTurn,
    required_outputs: list[str] | None = None,
    env_seed: int = 0,
    initial_state: dict[str, Any] | None = None,
    note: str = "",
) -> AuthoredTask:
    unknown = set(capabilities) - set(CAPABILITIES)
    if unknown:
        raise ValueError(f"{task_id}: unknown capability tags {sorted(unknown)}")
    return AuthoredTask(
        task_id=task_id,
        capabilities=capabilities,
        turns=list(turns),
        required_outputs=required_outputs or [],
        env_seed=env_seed,
        initial_state=initial_state,
        note=note,
    )


class ExampleTask(BaseModel):
    """A materialized example task: ground truth with outputs and the final state hash."""

    model_config = ConfigDict(extra="forbid")

    task_id: str
    domain: str
    capabilities: list[str]
    ground_truth: GroundTruth
    note: str = ""

    @property
    def goal(self) -> str:
        return self.ground_truth.turns[0].request if self.ground_truth.turns else ""

    def to_trajectory(self, tools: Toolset) -> Trajectory:
        """A task row (no messages yet) for the pipeline."""
        return Trajectory(
            id=stable_id("example-task", self.domain, self.task_id),
            task_id=self.task_id,
            goal=self.goal,
            domain=self.domain,
            capabilities=list(self.capabilities),
            ground_truth=self.ground_truth,
            tools=tools.to_openai(),
            method="example",
        )


# --------------------------------------------------------------------------------------
# materialization
# --------------------------------------------------------------------------------------


def _lookup(value: Any, path: str, where: str) -> Any:
    for part in re.findall(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]", path):
        key, index = part
        try:
            value = value[key] if key else value[int(index)]
        except (KeyError, IndexError, TypeError) as exc:
            raise ValueError(f"{where}: reference path {path!r} not found in output") from exc
    return value


def _resolve(value: Any, outputs: list[Any], where: str, found: list[tuple[int, str]]) -> Any:
    if isinstance(value, str):
        whole = _REF.fullmatch(value.strip())
        if whole:
            i = int(whole.group(1))
            if i >= len(outputs):
                raise ValueError(f"{where}: c{i} has not run yet")
            found.append((i, whole.group(2).lstrip(".")))
            return _lookup(outputs[i], whole.group(2), where)

        def sub(m: re.Match[str]) -> str:
            i = int(m.group(1))
            if i >= len(outputs):
                raise ValueError(f"{where}: c{i} has not run yet")
            found.append((i, m.group(2).lstrip(".")))
            return str(_lookup(outputs[i], m.group(2), where))

        return _REF.sub(sub, value)
    if isinstance(value, list):
        return [_resolve(v, outputs, where, found) for v in value]
    if isinstance(value, dict):
        return {k: _resolve(v, outputs, where, found) for k, v in value.items()}
    return value


def materialize(authored: AuthoredTask, domain: Any) -> ExampleTask:
    """Steps 1-4 of the module docstring; ``domain`` is a :class:`~trajsynth.envs.domain.Domain`
    (or anything with ``make(seed=, initial_state=)`` and ``name``)."""
    # 1) a fresh environment
    env = domain.make(seed=authored.env_seed, initial_state=authored.initial_state)
    outputs: list[Any] = []
    bindings: list[dict[str, Any]] = []
    expected_errors: list[int] = []
    turns: list[GoldTurn] = []
    for t_index, t in enumerate(authored.turns):
        steps: list[list[GoldCall]] = []
        # 2) run the gold calls in order
        for step in t.steps:
            gold_step = []
            for c in step:
                n = len(outputs)
                where = f"{authored.task_id} c{n} {c.name}"
                args: dict[str, Any] = {}
                for param, value in c.arguments.items():
                    found: list[tuple[int, str]] = []
                    args[param] = _resolve(value, outputs, where, found)
                    bindings += [
                        {"call": n, "param": param, "from_call": i, "path": p} for i, p in found
                    ]
                result = env.call(c.name, args)
                # 3) only deliberate errors may fail
                if c.expect_error is not None:
                    if result.category != c.expect_error:
                        raise ValueError(
                            f"{where}: expected error {c.expect_error!r}, got "
                            f"{result.category or 'success'}"
                        )
                    expected_errors.append(n)
                elif not result.ok:
                    raise ValueError(f"{where} failed: {result.error}")
                outputs.append(result.payload())
                gold_step.append(
                    GoldCall(
                        name=c.name,
                        arguments=args,
                        acceptable=c.acceptable,
                        output=result.payload(),
                    )
                )
            steps.append(gold_step)
        # 4) texts may refer to outputs
        ignore: list[tuple[int, str]] = []
        turns.append(
            GoldTurn(
                request=_resolve(t.request, outputs, f"turn {t_index}", ignore),
                kind=t.kind,
                steps=steps,
                answer=None if t.answer is None else _resolve(t.answer, outputs, "answer", ignore),
                clarification=t.clarification,
            )
        )
    ignore = []
    required = [_resolve(r, outputs, "required_outputs", ignore) for r in authored.required_outputs]
    gt = GroundTruth(
        turns=turns,
        env_seed=authored.env_seed,
        initial_state=authored.initial_state,
        final_state_hash=env.state_hash(),
        required_outputs=[str(r) for r in required],
        extra={"bindings": bindings, "expected_errors": expected_errors},
    )
    return ExampleTask(
        task_id=authored.task_id,
        domain=domain.name,
        capabilities=list(authored.capabilities),
        ground_truth=gt,
        note=authored.note,
    )
