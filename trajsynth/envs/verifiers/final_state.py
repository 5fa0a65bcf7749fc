"""Final-state verification as tau-bench does it, and "required outputs appear in the answer".

tau-bench (Yao et al. 2024, arXiv:2406.12045; ``tau_bench/envs/base.py::calculate_reward``)
grades an episode by its end state, not by the path:

1) reset a fresh environment to the task (its seed and initial state) and replay every gold
   call in order; its state hash is the expected one;
2) reset another fresh environment and replay the calls the trajectory made (failed calls
   change nothing); its state hash is the actual one;
3) the episode passes when the two hashes are equal: any order of calls that reaches the same
   state passes, and a path that misses one write fails. On a mismatch the diff of the two
   states says what differs (ECHO uses it as evidence of what was achieved);
4) when the task lists required outputs, each must appear in the final answer, compared
   case-insensitively with commas removed (tau-bench's rule); a required output that is a
   number also matches a number in the answer written to at least min(2, its decimals)
   places and equal at that precision ("26.22" for 26.218757, not "26").

The hash is :meth:`Environment.state_hash` (canonical, order-independent), so step 1 can
also be skipped by trusting ``ground_truth.final_state_hash`` (``use_cached=True``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...core.schema import ToolCall, Trajectory
from ...core.task import GoldCall, GroundTruth
from ..base import Environment, ToolResult
from ..state import StateDiff

__all__ = [
    "FinalStateResult",
    "final_state_match",
    "replay",
    "required_outputs_present",
    "verify_trajectory",
]

MakeEnv = Callable[[], Environment]


@dataclass(frozen=True)
class FinalStateResult:
    """Outcome of steps 1-3."""

    ok: bool
    expected_hash: str
    actual_hash: str
    diff: StateDiff | None = None
    results: tuple[ToolResult, ...] = field(default_factory=tuple)

    def __bool__(self) -> bool:
        return self.ok


def _as_call(c: ToolCall | GoldCall | dict[str, Any], i: int) -> tuple[str, dict[str, Any] | str]:
    if isinstance(c, GoldCall):
        return c.name, c.arguments
    if isinstance(c, ToolCall):
        return c.name, c.arguments
    fn = c["function"] if isinstance(c.get("function"), dict) else c
    return str(fn.get("name", "")), fn.get("arguments", {})


def replay(
    env: Environment, calls: Iterable[ToolCall | GoldCall | dict[str, Any]]
) -> list[ToolResult]:
    """Run ``calls`` in order on ``env`` (errors are results, the replay goes on)."""
    out = []
    for i, c in enumerate(calls):
        name, args = _as_call(c, i)
        if isinstance(args, str):
            out.append(env.execute(ToolCall(id=f"replay_{i}", name=name, arguments=args)))
        else:
            out.append(env.call(name, args))
    return out


def final_state_match(
    calls: Trajectory | Sequence[ToolCall | GoldCall | dict[str, Any]],
    ground_truth: GroundTruth,
    make_env: MakeEnv,
    *,
    use_cached: bool = False,
) -> FinalStateResult:
    """Steps 1-3: does replaying ``calls`` end in the state the gold calls end in?"""
    predicted = calls.calls() if isinstance(calls, Trajectory) else list(calls)
    # 1) expected state
    gold_env = make_env()
    gold_env.reset(ground_truth)
    if use_cached and ground_truth.final_state_hash:
        expected = ground_truth.final_state_hash
        gold_snap = None
    else:
        replay(gold_env, ground_truth.flat_calls())
        expected = gold_env.state_hash()
        gold_snap = gold_env.snapshot()
    # 2) actual state
    env = make_env()
    env.reset(ground_truth)
    results = tuple(replay(env, predicted))
    actual = env.state_hash()
    # 3) compare; explain a mismatch
    ok = actual == expected
    diff = None if ok or gold_snap is None else env.diff(gold_snap)
    return FinalStateResult(ok, expected, actual, diff, results)


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _decimals(text: str) -> int:
    return len(text.split(".", 1)[1]) if "." in text else 0


def _number_present(required: str, answer: str) -> bool:
    target = float(required)
    need = min(2, _decimals(required))
    for m in _NUMBER.finditer(answer):
        text = m.group(0)
        places = _decimals(text)
        if places >= need and abs(float(text) - target) <= 0.5 * 10**-places + 1e-9:
            return True
    return False


def required_outputs_present(answer: str | None, required: Sequence[str]) -> tuple[bool, list[str]]:
    """Step 4: (all present, the missing ones).

    >>> required_outputs_present("Booked: BK-1A2B, total $1,250.00", ["bk-1a2b", "1250"])
    (True, [])
    >>> required_outputs_present("About 26 miles.", ["26.218757"])
    (False, ['26.218757'])
    """
    text = (answer or "").lower().replace(",", "")
    missing = []
    for item in required:
        want = str(item).lower().replace(",", "")
        if want in text:
            continue
        if _NUMBER.fullmatch(want.strip()) and _number_present(want.strip(), text):
            continue
        missing.append(str(item))
    return not missing, missing


def verify_trajectory(
    traj: Trajectory, make_env: MakeEnv, *, use_cached: bool = False
) -> dict[str, Any]:
    """Final state (steps 1-3) and required outputs (step 4) of a trajectory, as data:
    ``{"ok", "state_ok", "outputs_ok", "missing_outputs", "expected_hash", "actual_hash",
    "diff"}``."""
    gt = traj.ground_truth
    if gt is None:
        raise ValueError(f"trajectory {traj.id} has no ground truth")
    state = final_state_match(traj, gt, make_env, use_cached=use_cached)
    outputs_ok, missing = required_outputs_present(traj.final_answer(), gt.required_outputs)
    return {
        "ok": state.ok and outputs_ok,
        "state_ok": state.ok,
        "outputs_ok": outputs_ok,
        "missing_outputs": missing,
        "expected_hash": state.expected_hash,
        "actual_hash": state.actual_hash,
        "diff": state.diff.describe() if state.diff else [],
    }
