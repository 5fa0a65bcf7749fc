"""ASTRA-style arena packages: a verified task as a self-contained RL environment whose reward
is computed from the package alone (Tian et al. 2026, "ASTRA: Automated Synthesis of agentic
Trajectories and Reinforcement Arenas", arXiv:2601.21558; code ``LianjiaTech/astra``, the
arena item ``{uuid, main_question, decomposition_trace, env_result{... tool_document,
tool_call_statement, code, tool_call_ans}}``).

A package (:class:`ArenaPackage`, JSON on disk) holds:

- the task: ``main_question`` and the conversation's turns (``ground_truth``: requests, gold
  steps with their outputs, environment seed and state, final state hash);
- the decomposition: one :class:`SubGoal` per gold call — a sub-question, the call
  statement, its gold output (the sub-answer) and its dependencies (the sub-goals whose
  outputs it takes): ASTRA's dependency DAG;
- ``tools``: the OpenAI schemas offered — the task's tools plus ``distractors``, look-alike
  tools the task does not need;
- the implementation: ``builtin`` (the trajsynth domain's reference tools, at the task's seed
  and state) or ``code`` (one Python function per tool, run in the sandbox);
- ``checksum``: BLAKE2b of everything else, checked on load.

Packing (:func:`pack_arena`) builds it from a verified trajectory row and accepts it only when
the implementation reproduces the gold: every gold call, run through the package's own tools
(generated code in the sandbox), returns the gold output (ASTRA accepts code whose stdout
contains the sub-answer; here the output must equal it), and the gold calls score reward 1.
Code that does not (a tampered or wrong function) is rejected with :class:`ArenaError`.

The reward (:func:`arena_reward`) needs only the package and the calls — no environment, no
LLM, no network:

1) walk the sub-goals in order; a sub-goal is *solved* by the first unused call that matches
   its call statement (BFCL semantics, :func:`~trajsynth.envs.verifiers.match_call`) and
   comes after the calls that solved every sub-goal it depends on (the DAG);
2) ``recall`` = solved ÷ sub-goals; ``precision`` = calls that solved a sub-goal ÷ calls made
   (extra and repeated calls lower it);
3) the reward is their F1 (0 when nothing is solved). ASTRA's exact formula is not published
   (the paper describes an F1-style reward whose precision penalises excess tool calls);
   this is that F1.

:class:`ArenaEnvironment` runs a package as an :class:`~trajsynth.envs.Environment` (offered
tools only; ``builtin`` delegates to the domain, ``code`` runs each call in the sandbox and
keeps the calls made as its state), and ``reward(messages)`` scores an episode.
:func:`arena_training_set` gives a trainer what it needs from a folder of packages: task
rows, a ``make_env(row)`` and a ``reward(row, messages)``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import Field, ValidationError

from ..core.config import StrictModel
from ..core.errors import DataError
from ..core.ids import canonical_json, stable_hash, stable_id
from ..core.jsonvalues import json_leaves
from ..core.schema import Message, ToolCall, Trajectory
from ..core.task import GoldCall, GroundTruth
from ..core.text import split_words
from .base import Environment, EnvSnapshot, ToolResult
from .sandbox import Sandbox
from .spec import Toolset
from .state import Change, StateDiff
from .verifiers.call_match import match_call

__all__ = [
    "FORMAT",
    "ArenaEnvironment",
    "ArenaError",
    "ArenaPackage",
    "ArenaReward",
    "ArenaSet",
    "BuiltinTools",
    "CodeTools",
    "SubGoal",
    "arena_reward",
    "arena_training_set",
    "load_arenas",
    "load_package",
    "pack_arena",
    "run_code",
    "table_code",
]

FORMAT: Final = "trajsynth-arena/1"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ArenaError(DataError):
    """A package that cannot be built or trusted (its code misses the gold, or it changed)."""


class SubGoal(StrictModel):
    """One node of the decomposition (ASTRA's ``{sub_question, sub_answer, dependency}``)."""

    id: int
    sub_question: str
    call: GoldCall = Field(description="The call statement; ``output`` is the sub-answer.")
    dependency: list[int] = Field(default_factory=list, description="Sub-goals it builds on.")
    turn: int = 0


class BuiltinTools(StrictModel):
    kind: Literal["builtin"] = "builtin"
    domain: str


class CodeTools(StrictModel):
    kind: Literal["code"] = "code"
    code: dict[str, str] = Field(description="Tool name → Python source defining that function.")
    timeout_s: float = Field(5.0, gt=0)


class ArenaPackage(StrictModel):
    """A self-contained arena (module docstring)."""

    format: Literal["trajsynth-arena/1"] = FORMAT
    uuid: str
    domain: str
    main_question: str
    ground_truth: GroundTruth
    sub_goals: list[SubGoal]
    tools: list[dict[str, Any]]
    distractors: list[str] = Field(default_factory=list)
    implementation: Annotated[BuiltinTools | CodeTools, Field(discriminator="kind")]
    source: dict[str, Any] = Field(default_factory=dict)
    checksum: str = ""

    def digest(self) -> str:
        return stable_hash(self.model_dump(mode="json", exclude={"checksum"}))

    def sealed(self) -> ArenaPackage:
        return self.model_copy(update={"checksum": self.digest()})

    def task_row(self) -> Trajectory:
        """A task row for trainers: the first request, the offered tools, the ground truth
        (with ``extra["arena"]`` naming this package)."""
        from ..core.prompts import system_prompt

        gt = self.ground_truth.model_copy(
            update={"extra": {**self.ground_truth.extra, "arena": self.uuid}}
        )
        return Trajectory(
            id=stable_id("arena-task", self.uuid),
            task_id=f"arena-{self.uuid}",
            goal=self.main_question,
            domain=self.domain,
            ground_truth=gt,
            tools=self.tools,
            messages=[
                Message(role="system", content=system_prompt()),
                Message(role="user", content=self.ground_truth.turns[0].request),
            ],
            method="arena",
            extra={"arena": self.uuid},
        )


# --------------------------------------------------------------------------------------
# the reward: from the package alone
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArenaReward:
    reward: float
    precision: float
    recall: float
    solved: tuple[int, ...]  # sub-goal ids solved
    calls: int
    extra_calls: int


def _calls_of(
    episode: Sequence[Message | ToolCall | dict[str, Any] | tuple[str, Any]],
) -> list[Any]:
    out: list[Any] = []
    for item in episode:
        if isinstance(item, Message):
            if item.role == "assistant":
                out += item.tool_calls
        else:
            out.append(item)
    return out


def arena_reward(
    package: ArenaPackage,
    episode: Sequence[Message | ToolCall | dict[str, Any] | tuple[str, Any]],
) -> ArenaReward:
    """Steps 1-3 of the module docstring: F1 of the sub-goals solved against the calls made.

    ``episode`` is the conversation's messages, or just the calls (``ToolCall``, or dicts /
    tuples that :func:`~trajsynth.envs.verifiers.match_call` accepts).
    """
    calls = _calls_of(episode)
    specs = {t.get("function", t).get("name"): t.get("function", t) for t in package.tools}
    used: dict[int, int] = {}  # call index → sub-goal id
    solved_at: dict[int, int] = {}  # sub-goal id → call index
    for g in package.sub_goals:
        after = max((solved_at[d] for d in g.dependency if d in solved_at), default=-1)
        if any(d not in solved_at for d in g.dependency):
            continue
        for j in range(after + 1, len(calls)):
            if j in used:
                continue
            spec = specs.get(g.call.name)
            if match_call(calls[j], g.call, spec.get("parameters") if spec else None):
                used[j] = g.id
                solved_at[g.id] = j
                break
    n_goals = len(package.sub_goals)
    recall = len(solved_at) / n_goals if n_goals else 1.0
    precision = len(used) / len(calls) if calls else (1.0 if not n_goals else 0.0)
    f1 = 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)
    return ArenaReward(
        reward=round(f1, 12),
        precision=precision,
        recall=recall,
        solved=tuple(sorted(solved_at)),
        calls=len(calls),
        extra_calls=len(calls) - len(used),
    )


# --------------------------------------------------------------------------------------
# code tools in the sandbox
# --------------------------------------------------------------------------------------

_HARNESS = """import json as _json, sys as _sys
_request = _json.loads(_sys.stdin.read())
_OCCURRENCE = _request["occurrence"]
{code}
try:
    _out = {name}(**_request["arguments"])
except Exception as _exc:
    print(_json.dumps({{"error": {{"type": "tool_error", "message": str(_exc)[:500]}}}}))
else:
    print(_json.dumps({{"output": _out}}, default=str))
"""


def run_code(
    sandbox: Sandbox,
    name: str,
    code: str,
    arguments: dict[str, Any],
    *,
    occurrence: int = 0,
    timeout: float = 5.0,
) -> tuple[Any, dict[str, str] | None]:
    """Run one tool function in the sandbox: (output, None) or (None, error). The module
    global ``_OCCURRENCE`` tells the function how many earlier calls of the episode had the
    same arguments (a stateless function can then replay a stateful tool's outputs)."""
    if not _NAME.match(name):
        return None, {"type": "invalid_value", "message": f"bad tool name {name!r}"}
    res = sandbox.run(
        _HARNESS.format(code=code, name=name),
        stdin=json.dumps({"arguments": arguments, "occurrence": occurrence}),
        timeout=timeout,
    )
    lines = [ln for ln in res.stdout.strip().splitlines() if ln.strip()]
    if not res.ok or not lines:
        why = "timed out" if res.timed_out else (res.stderr.strip().splitlines() or ["failed"])[-1]
        return None, {"type": "tool_crashed", "message": why[:500]}
    try:
        value = json.loads(lines[-1])
    except ValueError:
        return None, {"type": "tool_crashed", "message": "the tool printed no JSON result"}
    if isinstance(value, dict) and "error" in value:
        return None, value["error"]
    return (value.get("output") if isinstance(value, dict) else None), None


def table_code(name: str, records: Iterable[tuple[dict[str, Any], Any]]) -> str:
    """A tool function with embedded mock data (ASTRA's implementation style): for known
    arguments, the output recorded for their ``_OCCURRENCE``-th call (the last one after
    that); any other arguments raise ``LookupError``."""
    data = [[args, output] for args, output in records]
    return (
        f"def {name}(**kwargs):\n"
        f"    import json\n"
        f"    records = json.loads({json.dumps(json.dumps(data, ensure_ascii=False))})\n"
        f"    outputs = [output for args, output in records if args == kwargs]\n"
        f"    if not outputs:\n"
        f"        raise LookupError('no record for these arguments')\n"
        f"    return outputs[min(_OCCURRENCE, len(outputs) - 1)]\n"
    )


# --------------------------------------------------------------------------------------
# the environment
# --------------------------------------------------------------------------------------


class ArenaEnvironment(Environment):
    """A package as an environment: offered tools only; ``reward(messages)`` scores it."""

    def __init__(
        self,
        package: ArenaPackage,
        *,
        sandbox: Sandbox | None = None,
        max_steps: int = 64,
        max_observation_chars: int | None = 16_000,
    ) -> None:
        super().__init__(max_steps=max_steps, max_observation_chars=max_observation_chars)
        self.package = package
        self.domain = package.domain
        self.toolset = Toolset.from_openai(package.tools)
        self.offered = {t.name for t in self.toolset.tools}
        self._own_sandbox = False
        self._sandbox = sandbox
        self._inner: Environment | None = None
        self._log: tuple[str, ...] = ()
        impl = package.implementation
        if isinstance(impl, BuiltinTools):
            from .domains import get_domain

            gt = package.ground_truth
            self._inner = get_domain(impl.domain).make(
                seed=gt.env_seed,
                initial_state=gt.initial_state,
                max_steps=max_steps,
                max_observation_chars=max_observation_chars,
            )

    @property
    def sandbox(self) -> Sandbox:
        if self._sandbox is None:
            self._sandbox = Sandbox()
            self._own_sandbox = True
        return self._sandbox

    def reward(self, episode: Sequence[Message | ToolCall | dict[str, Any]]) -> ArenaReward:
        return arena_reward(self.package, episode)

    # -- Environment ----------------------------------------------------------------------
    def _reset(self, task: GroundTruth | None) -> None:
        self._log = ()
        if self._inner is not None:
            self._inner.reset(self.package.ground_truth)

    def _execute(self, call: ToolCall) -> ToolResult:
        def error(kind: str, message: str, args: dict[str, Any] | None = None) -> ToolResult:
            return ToolResult(call.id, call.name, args, error={"type": kind, "message": message})

        if call.name not in self.offered:
            return error("unknown_tool", f"unknown tool {call.name!r}")
        if self._inner is not None:
            return self._inner.execute(call)
        args = call.parsed_arguments()
        if args is None:
            return error("malformed_arguments", "arguments are not a JSON object")
        from .verifiers.schema import check_arguments

        issues = check_arguments(self.toolset[call.name], args)
        if issues:
            return error(issues[0].category, "; ".join(i.message for i in issues), args)
        impl = self.package.implementation
        assert isinstance(impl, CodeTools)
        key = canonical_json([call.name, args])
        output, err = run_code(
            self.sandbox,
            call.name,
            impl.code[call.name],
            args,
            occurrence=self._log.count(key),
            timeout=impl.timeout_s,
        )
        if err is not None:
            return error(err.get("type", "tool_error"), err.get("message", ""), args)
        self._log = (*self._log, key)
        return ToolResult(call.id, call.name, args, output=output)

    def _snapshot_state(self) -> Any:
        return self._inner.snapshot() if self._inner is not None else self._log

    def _restore_state(self, state: Any) -> None:
        if self._inner is not None:
            self._inner.restore(state)
        else:
            self._log = tuple(state)

    def state_hash(self) -> str:
        if self._inner is not None:
            return self._inner.state_hash()
        return stable_hash(sorted(self._log))

    def state(self) -> dict[str, Any]:
        if self._inner is not None:
            return self._inner.state()
        return {"calls": {str(i): c for i, c in enumerate(self._log)}}

    def diff(self, a: EnvSnapshot, b: EnvSnapshot | None = None) -> StateDiff:
        if self._inner is not None:
            return self._inner.diff(a.state, None if b is None else b.state)
        before, after = a.state, (self._log if b is None else b.state)
        return StateDiff(
            tuple(
                Change("calls", str(i), "added", None, c)
                for i, c in enumerate(after)
                if i >= len(before)
            )
        )

    def close(self) -> None:
        if self._own_sandbox and self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None


# --------------------------------------------------------------------------------------
# packing
# --------------------------------------------------------------------------------------


def _values(value: Any) -> set[str]:
    """The leaves of a JSON value that can tie a call's argument to an earlier call's output:
    strings of 2+ characters, and numbers of magnitude 10 or more (as canonical JSON)."""
    return {
        v if isinstance(v, str) else canonical_json(v)
        for v in json_leaves(value)
        if (isinstance(v, str) and len(v) >= 2)
        or (isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) >= 10)
    }


def _dependencies(gt: GroundTruth, calls: list[GoldCall]) -> list[list[int]]:
    """Per gold call, the earlier calls whose outputs it takes: the task's recorded bindings,
    else argument values found in earlier outputs."""
    deps: list[set[int]] = [set() for _ in calls]
    bindings = gt.extra.get("bindings") if isinstance(gt.extra, dict) else None
    if bindings:
        for b in bindings:
            i, j = b.get("call"), b.get("from_call")
            if isinstance(i, int) and isinstance(j, int) and 0 <= j < i < len(calls):
                deps[i].add(j)
    else:
        for i, c in enumerate(calls):
            mine = _values(c.arguments)
            for j in range(i):
                if mine & _values(calls[j].output):
                    deps[i].add(j)
    return [sorted(d) for d in deps]


def _words(text: str) -> set[str]:
    return set(split_words(text.lower()))


def _distractors(tools: list[dict[str, Any]], used: set[str], k: int) -> list[dict[str, Any]]:
    """The ``k`` offered tools the task does not use that look most like the ones it uses
    (word overlap of names and descriptions)."""
    if k <= 0:
        return []
    fn = [t.get("function", t) for t in tools]
    used_words = set().union(
        *(_words(f["name"] + " " + f.get("description", "")) for f in fn if f["name"] in used)
    )
    others = [t for t, f in zip(tools, fn, strict=True) if f["name"] not in used]

    def score(t: dict[str, Any]) -> tuple[float, str]:
        f = t.get("function", t)
        w = _words(f["name"] + " " + f.get("description", ""))
        return (-(len(w & used_words) / len(w | used_words or {1})), f["name"])

    return sorted(others, key=score)[:k]


def _sub_question(call: GoldCall, tools: dict[str, dict[str, Any]]) -> str:
    desc = (tools.get(call.name, {}).get("description") or call.name).strip().rstrip(".")
    args = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in call.arguments.items())
    return f"{desc} ({args})" if args else desc


def pack_arena(
    row: Trajectory,
    *,
    code: Literal["reference", "table"] | dict[str, str] = "reference",
    distractors: int = 3,
    sandbox: Sandbox | None = None,
    make_env: Any = None,
    require_success: bool = True,
) -> ArenaPackage:
    """The package of one verified trajectory row (module docstring), or :class:`ArenaError`.

    ``code``: ``reference`` (the built-in domain's tools), ``table`` (generated functions with
    the gold outputs as mock data), or the source of each tool (e.g. written by an LLM; tools
    it lacks get no-record functions). ``make_env(domain, seed, initial_state)`` makes the
    reference environment (default: the built-in domains).
    """
    where = f"row {row.id}"
    if require_success and not row.success:
        raise ArenaError(f"{where} is not a verified success; only verified tasks are packed")
    gt = row.ground_truth
    if gt is None or not gt.flat_calls():
        raise ArenaError(f"{where} has no gold calls to decompose")
    if gt.extra.get("expected_errors"):
        raise ArenaError(
            f"{where}: its gold makes calls meant to fail; an arena rewards needed calls"
        )
    flat = [c.model_copy(deep=True) for c in gt.flat_calls()]
    tools_by_name = {t.get("function", t)["name"]: t.get("function", t) for t in row.tools or []}
    missing = sorted({c.name for c in flat} - set(tools_by_name))
    if missing:
        raise ArenaError(f"{where}: gold calls tools the row does not offer: {missing}")
    # the reference run: fills missing outputs and checks the gold against the domain
    reference = _reference_env(row, gt, make_env)
    if reference is not None:
        reference.reset(gt)
        for i, c in enumerate(flat):
            r = reference.call(c.name, c.arguments)
            if not r.ok:
                raise ArenaError(
                    f"{where}: gold call {i} {c.name} fails in the reference: {r.error}"
                )
            if c.output is None:
                c.output = r.output
        if gt.final_state_hash and reference.state_hash() != gt.final_state_hash:
            raise ArenaError(f"{where}: the gold calls do not reach the task's final state")
    elif any(c.output is None for c in flat):
        raise ArenaError(f"{where}: gold outputs are unknown and no reference can run them")
    # decomposition: sub-goals and their DAG
    deps = _dependencies(gt, flat)
    turn_of = [t for t, turn in enumerate(gt.turns) for s in turn.steps for _ in s]
    sub_goals = [
        SubGoal(id=i, sub_question=_sub_question(c, tools_by_name), call=c, dependency=deps[i],
                turn=turn_of[i])
        for i, c in enumerate(flat)
    ]  # fmt: skip
    used = {c.name for c in flat}
    picked = _distractors(list(row.tools), used, distractors)
    offered = [t for t in row.tools if t.get("function", t)["name"] in used] + picked
    names = [t.get("function", t)["name"] for t in picked]
    impl: BuiltinTools | CodeTools
    if code == "reference":
        if reference is None:
            raise ArenaError(f"{where}: domain {row.domain!r} has no reference implementation")
        impl = BuiltinTools(domain=row.domain)
    else:
        if code == "table":
            records: dict[str, list[tuple[dict[str, Any], Any]]] = {}
            for c in flat:
                records.setdefault(c.name, []).append((c.arguments, c.output))
            sources = {n: table_code(n, recs) for n, recs in records.items()}
        else:
            sources = dict(code)
        for n in [*sorted(used), *names]:
            if n not in sources:
                sources[n] = table_code(n, []) if n in names else ""
        lacking = sorted(n for n in used if not sources.get(n, "").strip())
        if lacking:
            raise ArenaError(f"{where}: no code for tools {lacking}")
        impl = CodeTools(code={n: sources[n] for n in [*sorted(used), *names]})
    gt_out = gt.model_copy(
        update={"turns": _with_outputs(gt, flat), "extra": {**gt.extra, "source_row": row.id}}
    )
    package = ArenaPackage(
        uuid=stable_id("arena", row.id, impl.kind, names)[:24],
        domain=row.domain,
        main_question=" ".join(t.request for t in gt.turns),
        ground_truth=gt_out,
        sub_goals=sub_goals,
        tools=offered,
        distractors=names,
        implementation=impl,
        source={"row_id": row.id, "task_id": row.task_id, "method": row.method},
    )
    validate_package(package, sandbox=sandbox)
    return package.sealed()


def _reference_env(row: Trajectory, gt: GroundTruth, make_env: Any) -> Environment | None:
    if make_env is not None:
        return make_env(row.domain, gt.env_seed, gt.initial_state)
    from .domains import BUILTIN_DOMAINS

    if row.domain not in BUILTIN_DOMAINS:
        return None
    return BUILTIN_DOMAINS[row.domain].make(seed=gt.env_seed, initial_state=gt.initial_state)


def _with_outputs(gt: GroundTruth, flat: list[GoldCall]) -> list[Any]:
    it = iter(flat)
    return [
        t.model_copy(update={"steps": [[next(it) for _ in s] for s in t.steps]}) for t in gt.turns
    ]


def validate_package(package: ArenaPackage, *, sandbox: Sandbox | None = None) -> None:
    """Run every gold call through the package's own tools: each must return its gold
    output, and the gold calls must score reward 1 (ArenaError otherwise)."""
    env = ArenaEnvironment(package, sandbox=sandbox)
    try:
        env.reset(package.ground_truth)
        for g in package.sub_goals:
            r = env.call(g.call.name, g.call.arguments)
            if not r.ok:
                raise ArenaError(
                    f"arena {package.uuid}: tool {g.call.name} fails on gold call {g.id}: "
                    f"{r.error.get('message') if r.error else ''}"
                )
            if canonical_json(r.output) != canonical_json(g.call.output):
                raise ArenaError(
                    f"arena {package.uuid}: tool {g.call.name} does not reproduce the gold "
                    f"output of call {g.id} (got {canonical_json(r.output)[:120]}, expected "
                    f"{canonical_json(g.call.output)[:120]})"
                )
        gold = [(g.call.name, g.call.arguments) for g in package.sub_goals]
        if arena_reward(package, gold).reward != 1.0:
            raise ArenaError(f"arena {package.uuid}: the gold calls do not score reward 1")
    finally:
        env.close()


# --------------------------------------------------------------------------------------
# files
# --------------------------------------------------------------------------------------


def load_package(path: str | Path, *, verify: bool = True) -> ArenaPackage:
    """One package file; with ``verify`` its checksum must match (ArenaError otherwise)."""
    path = Path(path)
    try:
        package = ArenaPackage.model_validate_json(path.read_text())
    except (OSError, ValueError, ValidationError) as exc:
        raise ArenaError(f"{path} is not an arena package: {str(exc).splitlines()[0]}") from exc
    if verify and package.checksum != package.digest():
        raise ArenaError(
            f"{path}: arena {package.uuid} was modified after packing (checksum mismatch)",
            hint="pack it again with `trajsynth arena pack`",
        )
    return package


def load_arenas(folder: str | Path) -> list[ArenaPackage]:
    """Every package (``*.json``) in a folder, in name order."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ArenaError(f"{folder} is not a folder of arena packages")
    files = sorted(p for p in folder.glob("*.json") if p.name != "index.json")
    if not files:
        raise ArenaError(f"{folder} holds no arena packages", hint="run `trajsynth arena pack`")
    return [load_package(p) for p in files]


@dataclass
class ArenaSet:
    """A folder of packages as a trainer consumes it: one task row per package, a fresh
    environment per episode (sharing one sandbox) and the package's reward."""

    packages: dict[str, ArenaPackage]
    rows: list[Trajectory]
    sandbox: Sandbox | None = None

    def package_of(self, row: Trajectory) -> ArenaPackage:
        uuid = row.extra.get("arena") if isinstance(row.extra, dict) else None
        if uuid not in self.packages:
            raise ArenaError(f"row {row.id} names no arena of this set")
        return self.packages[uuid]

    def make_env(self, row: Trajectory) -> ArenaEnvironment:
        package = self.package_of(row)
        if self.sandbox is None and isinstance(package.implementation, CodeTools):
            self.sandbox = Sandbox()
        return ArenaEnvironment(package, sandbox=self.sandbox)

    def reward(
        self, row: Trajectory, episode: Sequence[Message | ToolCall | dict[str, Any]]
    ) -> float:
        return arena_reward(self.package_of(row), episode).reward

    def close(self) -> None:
        if self.sandbox is not None:
            self.sandbox.close()
            self.sandbox = None


def arena_training_set(folder: str | Path, *, sandbox: Sandbox | None = None) -> ArenaSet:
    """Every package of ``folder`` (checksums verified) as an :class:`ArenaSet`."""
    packages = {p.uuid: p for p in load_arenas(folder)}
    return ArenaSet(packages, [p.task_row() for p in packages.values()], sandbox)
