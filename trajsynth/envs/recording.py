"""Record tool results, and replay them so a trajectory re-executes identically later.

A record says: in domain D, from the state with hash S, the call ``name(arguments)`` returned
this output (or error) and left the state with hash S'. Keyed by (D, S, name, canonical
arguments), records replay exactly, also along branches (TSR and STeCa restore a snapshot and
try another call: the key carries the state, so each branch finds its own results).

Steps:

1) :class:`RecordingEnvironment` wraps a real environment; every ``reset`` records the state
   hash a (domain, seed, initial state) starts from, every call its result and the hashes
   before and after;
2) :class:`Recorder` holds the records (thread-safe), saves them as JSON Lines and loads them;
3) :class:`ReplayEnvironment` answers calls from the records without running anything. Its
   state is the recorded state hash, so snapshot/restore/state_hash work as usual; a call
   nobody recorded returns a ``not_recorded`` error;
4) :meth:`Recorder.add_trajectory` records a trajectory's own tool messages (calls and the
   tool replies that answered them), with synthetic state keys chained call by call. This is
   how imported toolsets without an implementation (tau-bench logs, StableToolBench answers)
   become replayable.
"""

from __future__ import annotations

import contextlib
import json
import threading
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..core.errors import DataError
from ..core.ids import canonical_json, stable_hash
from ..core.schema import Message, ToolCall, Trajectory
from ..core.task import GroundTruth
from .base import Environment, EnvSnapshot, ToolResult
from .spec import Toolset
from .state import StateDiff
from .tools import ToolError

__all__ = [
    "Recorder",
    "RecordingEnvironment",
    "ReplayEnvironment",
    "ToolRecord",
    "paired_replies",
    "root_key",
]


class ToolRecord(BaseModel):
    """One recorded call (kind ``call``) or episode start (kind ``reset``)."""

    model_config = ConfigDict(extra="forbid")

    kind: str = "call"
    domain: str
    state: str  # hash before the call (reset: the start key)
    name: str = ""
    arguments: str = "{}"  # canonical JSON
    output: Any = None
    error: dict[str, str] | None = None
    state_after: str = ""

    def key(self) -> str:
        return stable_hash([self.kind, self.domain, self.state, self.name, self.arguments])


def root_key(domain: str, seed: int, initial_state: Any) -> str:
    """The key of an episode start: (domain, seed, initial-state override)."""
    return "root:" + stable_hash([domain, seed, initial_state])


def _canonical_args(arguments: str) -> str:
    try:
        return canonical_json(json.loads(arguments) if arguments.strip() else {})
    except json.JSONDecodeError:
        return arguments


def paired_replies(messages: list[Message]) -> list[tuple[ToolCall, str | None]]:
    """Each call with the content of the tool message that answered it.

    The tool messages after an assistant message answer its calls; a reply is matched by
    ``tool_call_id`` when that id is unique in the block, else by position (logs such as
    tau-bench's reuse call ids)."""
    out: list[tuple[ToolCall, str | None]] = []
    for i, m in enumerate(messages):
        if m.role != "assistant" or not m.tool_calls:
            continue
        block = []
        for later in messages[i + 1 :]:
            if later.role != "tool":
                break
            block.append(later)
        unused = list(range(len(block)))
        ids = [t.tool_call_id for t in block]
        for j, call in enumerate(m.tool_calls):
            match = next((k for k in unused if ids[k] == call.id), None)
            if match is None or ids.count(call.id) > 1:
                match = j if j in unused else (unused[0] if unused else None)
            if match is not None:
                unused.remove(match)
            out.append((call, None if match is None else block[match].content))
    return out


class Recorder:
    """A thread-safe store of records (step 2)."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path else None
        self._lock = threading.Lock()
        self._records: dict[str, ToolRecord] = {}
        self._new: list[ToolRecord] = []
        if self.path is not None and self.path.exists():
            self.load(self.path)

    def __len__(self) -> int:
        return len(self._records)

    def add(self, record: ToolRecord) -> None:
        with self._lock:
            key = record.key()
            if key not in self._records:
                self._records[key] = record
                self._new.append(record)

    def find(self, kind: str, domain: str, state: str, name: str = "", arguments: str = "{}"):
        probe = ToolRecord(kind=kind, domain=domain, state=state, name=name, arguments=arguments)
        return self._records.get(probe.key())

    def load(self, path: str | Path) -> None:
        try:
            lines = Path(path).read_text().splitlines()
        except OSError as exc:
            raise DataError(f"{path}: cannot read recorded tool results ({exc})") from exc
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                rec = ToolRecord.model_validate_json(line)
            except ValueError as exc:
                raise DataError(f"{path}:{n}: not a tool record ({exc})") from exc
            self._records.setdefault(rec.key(), rec)

    def save(self, path: str | Path | None = None) -> Path | None:
        """Append the records added since the last save (or write all to a new ``path``)."""
        target = Path(path) if path else self.path
        if target is None:
            return None
        with self._lock:
            records = list(self._records.values()) if path else list(self._new)
            self._new = [] if not path else self._new
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "a" if not path else "w") as f:
            for rec in records:
                f.write(rec.model_dump_json() + "\n")
        return target

    def add_trajectory(self, traj: Trajectory, *, seed: int | None = None) -> int:
        """Step 4: record the trajectory's calls and the tool messages that answered them.
        Returns how many calls were recorded."""
        gt = traj.ground_truth
        seed = gt.env_seed if gt and seed is None else (seed or 0)
        init = gt.initial_state if gt else None
        state = root_key(traj.domain, seed, init)
        n = 0
        for call, content in paired_replies(traj.messages):
            args = _canonical_args(call.arguments)
            output: Any = content
            error = None
            if isinstance(content, str):
                try:
                    output = json.loads(content)
                except json.JSONDecodeError:
                    output = content
            if isinstance(output, dict) and isinstance(output.get("error"), dict):
                error, output = output["error"], None
            after = stable_hash([state, call.name, args])
            self.add(ToolRecord(domain=traj.domain, state=state, name=call.name, arguments=args,
                                output=output, error=error, state_after=after))  # fmt: skip
            state = after
            n += 1
        return n


class RecordingEnvironment(Environment):
    """Step 1: a real environment whose resets and call results are recorded."""

    def __init__(self, inner: Environment, recorder: Recorder) -> None:
        super().__init__(
            max_steps=inner.max_steps, max_observation_chars=inner.max_observation_chars
        )
        self.inner = inner
        self.recorder = recorder
        self.domain = inner.domain
        self.toolset = inner.toolset

    def _reset(self, task: GroundTruth | None) -> None:
        self.inner.reset(task)
        seed = task.env_seed if task else getattr(self.inner, "seed", 0)
        init = task.initial_state if task else getattr(self.inner, "initial_state", None)
        self.recorder.add(ToolRecord(kind="reset", domain=self.domain,
                                     state=root_key(self.domain, seed, init),
                                     state_after=self.inner.state_hash()))  # fmt: skip

    def _execute(self, call: ToolCall) -> ToolResult:
        before = self.inner.state_hash()
        result = self.inner.execute(call)
        self.recorder.add(
            ToolRecord(domain=self.domain, state=before, name=call.name,
                       arguments=_canonical_args(call.arguments), output=result.output,
                       error=result.error, state_after=self.inner.state_hash())
        )  # fmt: skip
        return result

    def _is_terminal(self, name: str) -> bool:
        return self.inner._is_terminal(name)

    def _snapshot_state(self) -> Any:
        return self.inner.snapshot()

    def _restore_state(self, state: Any) -> None:
        self.inner.restore(state)

    def state_hash(self) -> str:
        return self.inner.state_hash()

    def state(self) -> dict[str, Any]:
        return self.inner.state()

    def diff(self, a: EnvSnapshot, b: EnvSnapshot | None = None) -> StateDiff:
        return self.inner.diff(a.state, None if b is None else b.state)

    def close(self) -> None:
        self.inner.close()


class ReplayEnvironment(Environment):
    """Step 3: answers calls from recorded results; runs nothing."""

    def __init__(
        self,
        domain: str,
        toolset: Toolset,
        recorder: Recorder,
        *,
        seed: int = 0,
        initial_state: Any = None,
        max_steps: int = 64,
        max_observation_chars: int | None = 16_000,
    ) -> None:
        super().__init__(max_steps=max_steps, max_observation_chars=max_observation_chars)
        self.domain = domain
        self.toolset = toolset
        self.recorder = recorder
        self.seed = seed
        self.initial_state = initial_state
        self.key = self._start(seed, initial_state)

    def _start(self, seed: int, initial_state: Any) -> str:
        root = root_key(self.domain, seed, initial_state)
        rec = self.recorder.find("reset", self.domain, root)
        return rec.state_after if rec is not None else root

    def _reset(self, task: GroundTruth | None) -> None:
        if task is None:
            self.key = self._start(self.seed, self.initial_state)
        else:
            self.key = self._start(task.env_seed, task.initial_state)

    def _execute(self, call: ToolCall) -> ToolResult:
        args = _canonical_args(call.arguments)
        rec = self.recorder.find("call", self.domain, self.key, call.name, args)
        parsed = None
        with contextlib.suppress(json.JSONDecodeError):
            parsed = json.loads(args)
        if rec is None:
            err = ToolError("not_recorded", f"no recorded result for {call.name}({args})")
            return ToolResult(call.id, call.name, parsed, error=err.to_json())
        self.key = rec.state_after or self.key
        return ToolResult(call.id, call.name, parsed, output=rec.output, error=rec.error)

    def _snapshot_state(self) -> str:
        return self.key

    def _restore_state(self, state: str) -> None:
        self.key = state

    def state_hash(self) -> str:
        return self.key

    def state(self) -> dict[str, Any]:
        return {"recorded_state": self.key}

    def diff(self, a: EnvSnapshot, b: EnvSnapshot | None = None) -> StateDiff:
        """Recorded states carry no tables: the diff is unknown (empty)."""
        return StateDiff()
