"""Training and evaluation tasks made from the built-in domains' example tasks by varying their
values, and the gold trajectories that solve them.

A small stand-in for task synthesis (``magnet_tasks``), so the trainer's tests, benchmarks and demos
have hundreds of executable tasks today. Steps for one variant of an authored example task:

1) slots: each literal value of a gold call (a string or number, never a reference to an
   earlier output) that appears word-bounded in the request text, and each number of the
   request that appears inside a string argument (``"240 * (1 + {{c0.value}})"``);
2) alternatives, from the domain itself: a parameter's ``enum``; the values that the seeded
   state holds in fields of the same name (``city``, ``order_id``, ``path``; ``from_unit``
   also takes ``unit``); the values the parameter takes in the domain's other example tasks.
   A number gets a random value of the same kind, sign and number of decimals, within a factor
   of about 3;
3) substitute old → new everywhere in the task (requests, clarifications, arguments, inside
   argument strings), then :func:`~trajsynth.envs.tasks.materialize` it: the gold calls run in
   a fresh environment, outputs and references are filled in, the final state hash recorded. A
   variant whose gold calls now fail (no flight on that route, a directory where a file was
   meant) is dropped, as is a duplicate of a variant already made;
A second family is built outright for credit assignment (:func:`workflow_tasks`): four math
workflows of five dependent calls each ("convert, round, store, recall, double"; "solve,
average the roots, round, store, list"; ...), all ten math tools offered, so the request
decides which tool comes at each step and one early wrong call dooms the episode (every
later call reads its output; a reward over every step is then 0).

4) :func:`gold_trajectory` plays a task's gold calls through a fresh environment step by step,
   so tool messages are exactly what a policy would see in a rollout, and adds the clarifying
   question of a ``clarify`` turn, the user's answer, and a final answer naming the required
   outputs (the expected text of a ``no_tool`` turn).
"""

from __future__ import annotations

import json
import random
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..core.ids import canonical_json, seed_from, stable_id
from ..core.schema import Message, ToolCall, Trajectory
from ..core.task import GroundTruth

__all__ = ["env_maker", "gold_trajectory", "task_variants", "workflow_tasks"]

_REF = re.compile(r"\{\{.*?\}\}")
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.]*\w)")


def _is_ref(value: Any) -> bool:
    return isinstance(value, str) and "{{" in value


def _word(text: str) -> re.Pattern[str]:
    return re.compile(r"(?<![\w@.#/-])" + re.escape(text) + r"(?![\w@#/-]|\.\w)")


def _literals(task: Any) -> Iterable[tuple[str, Any]]:
    for t in task.turns:
        for step in t.steps:
            for c in step:
                for param, value in c.arguments.items():
                    literal = isinstance(value, (str, int, float)) and not isinstance(value, bool)
                    if literal and not _is_ref(value):
                        yield param, value


def _pools(domain: Any, seed: int) -> dict[str, set[Any]]:
    """Step 2: alternative values per parameter name, from the domain's own data."""
    pools: dict[str, set[Any]] = defaultdict(set)
    for table in domain.build_state(seed).values():
        for record in table.values():
            if isinstance(record, dict):
                for field, value in record.items():
                    if isinstance(value, str) and 0 < len(value) <= 60 and "\n" not in value:
                        pools[field].add(value)
    for tool in domain.tools:
        for param, schema in (tool.spec.parameters.get("properties") or {}).items():
            for value in schema.get("enum") or []:
                if isinstance(value, str):
                    pools[param].add(value)
    for authored in domain.authored_tasks():
        for param, value in _literals(authored):
            if isinstance(value, str):
                pools[param].add(value)
    return pools


def _alternatives(param: str, value: Any, pools: dict[str, set[Any]]) -> list[Any]:
    if isinstance(value, str):
        names = [param] + [f for f in pools if param.endswith("_" + f)]
        return sorted({v for n in names for v in pools.get(n, ())} - {value})
    return []


def _new_number(value: int | float, rng: random.Random) -> int | float:
    text = repr(value)
    decimals = len(text.split(".")[1]) if "." in text and isinstance(value, float) else 0
    low, high = abs(value) / 3, abs(value) * 3 + 10
    new = rng.uniform(low, high)
    sign = -1 if value < 0 else 1
    if isinstance(value, int):
        return sign * max(1, round(new))
    return sign * round(new, max(1, decimals))


def _substitute(value: Any, old: Any, new: Any) -> Any:
    if isinstance(value, list):
        return [_substitute(v, old, new) for v in value]
    if isinstance(value, dict):
        return {k: _substitute(v, old, new) for k, v in value.items()}
    if type(value) is type(old) and value == old:
        return new
    if isinstance(value, str):
        pieces = _REF.split(value)
        refs = _REF.findall(value)
        pattern = _word(str(old))
        pieces = [pattern.sub(str(new).replace("\\", r"\\"), p) for p in pieces]
        return "".join(p + (refs[i] if i < len(refs) else "") for i, p in enumerate(pieces))
    return value


def _apply(authored: Any, old: Any, new: Any) -> Any:
    data = authored.model_dump()
    for t in data["turns"]:
        for key in ("request", "clarification", "answer"):
            if t.get(key):
                t[key] = _substitute(t[key], old, new)
        for step in t["steps"]:
            for c in step:
                c["arguments"] = _substitute(c["arguments"], old, new)
                if c.get("acceptable"):
                    c["acceptable"] = _substitute(c["acceptable"], old, new)
    data["required_outputs"] = [_substitute(r, old, new) for r in data["required_outputs"]]
    return type(authored).model_validate(data)


def _slots(authored: Any) -> list[tuple[str, Any]]:
    """Step 1."""
    texts = " ".join(t.request + " " + (t.clarification or "") for t in authored.turns)
    seen: dict[str, tuple[str, Any]] = {}
    for param, value in _literals(authored):
        text = str(value)
        if len(text) >= 2 and _word(text).search(texts) and text not in seen:
            seen[text] = (param, value)
    strings = [
        v
        for t in authored.turns
        for s in t.steps
        for c in s
        for v in c.arguments.values()
        if isinstance(v, str)
    ]
    for m in _NUMBER.finditer(texts):
        text = m.group(0)
        if text not in seen and any(_word(text).search(_REF.sub("", s)) for s in strings):
            seen[text] = ("", float(text) if "." in text else int(text))
    return list(seen.values())


def _variant(authored: Any, pools: dict[str, set[Any]], rng: random.Random) -> Any:
    """Steps 1-3 (before materializing): each slot takes a new value with probability 0.8."""
    for param, value in _slots(authored):
        if rng.random() < 0.2:
            continue
        if isinstance(value, (int, float)):
            new: Any = _new_number(value, rng)
        else:
            options = _alternatives(param, value, pools)
            if not options:
                continue
            new = rng.choice(options)
        authored = _apply(authored, value, new)
    return authored


def task_variants(
    n: int,
    *,
    seed: int = 0,
    domains: Sequence[str] | None = None,
    task_ids: Sequence[str] | None = None,
    include_originals: bool = True,
    max_tries: int | None = None,
    distractors: int | None = None,
) -> list[Trajectory]:
    """Up to ``n`` distinct task rows (no messages yet), cycling over the selected example
    tasks and varying each as the module docstring says. Deterministic for a seed.

    ``distractors``: offer only the tools the gold calls use plus this many other tools of
    the domain, drawn at random (LoopTool's seed dialogs offer 3 to 11 tools); None offers
    the domain's whole toolset."""
    from ..envs.domains import BUILTIN_DOMAINS, get_domain
    from ..envs.tasks import materialize

    names = list(domains) if domains is not None else list(BUILTIN_DOMAINS)
    families = []
    for name in names:
        domain = get_domain(name)
        pools = _pools(domain, 0)
        toolset = domain.toolset()
        for authored in domain.authored_tasks():
            if task_ids is None or authored.task_id in task_ids:
                families.append((domain, pools, toolset, authored))
    if not families:
        return []
    if max_tries is None:  # attempts per family before giving up on it
        max_tries = 4 * (n // len(families) + 1) + 10
    rows: list[Trajectory] = []
    seen: set[str] = set()
    tries: dict[int, int] = defaultdict(int)
    k = 0
    while len(rows) < n and any(tries[i] < max_tries for i in range(len(families))):
        i = k % len(families)
        k += 1
        if tries[i] >= max_tries:
            continue
        domain, pools, toolset, authored = families[i]
        first = include_originals and tries[i] == 0
        rng = random.Random(seed_from("trajsynth.train.synth", seed, authored.task_id, tries[i]))
        tries[i] += 1
        candidate = authored if first else _variant(authored, pools, rng)
        try:
            example = materialize(candidate, domain)
        except (ValueError, KeyError, TypeError):
            continue  # 3) the gold calls fail with these values
        key = canonical_json(example.ground_truth.model_dump(mode="json", exclude={"extra"}))
        if key in seen:
            continue
        seen.add(key)
        row = example.to_trajectory(_offered(toolset, example, distractors, rng))
        rows.append(
            row.derive(
                id=stable_id("task-variant", key),
                task_id=f"{authored.task_id}~{stable_id(key)[:8]}",
                method="variation",
                extra={"family": authored.task_id},
            )
        )
    return rows


def _workflow(kind: int, rng: random.Random) -> tuple[str, list[Any], dict[str, Any] | None]:
    """One of four five-step math workflows with fresh values: (request, calls, initial
    memory). Each call reads the previous one's output."""
    from ..envs.tasks import call, ref

    name = rng.choice(["total", "score", "result", "answer", "saved", "final", "target_x"])
    d = rng.randint(0, 3)
    if kind == 0:
        v = rng.randint(2, 500)
        return (
            f"Convert {v} km to mi, round it to {d} places, store it as {name}, then recall "
            f"{name} and double it.",
            [
                call("convert_units", value=v, from_unit="km", to_unit="mi"),
                call("round_number", value=ref("c0.result"), digits=d),
                call("store_value", name=name, value=ref("c1.result")),
                call("recall_value", name=name),
                call("calculate", expression="{{c3.value}} * 2"),
            ],
            None,
        )
    if kind == 1:
        r1, r2 = rng.sample(range(-9, 10), 2)
        b, c = -(r1 + r2), r1 * r2
        sign_b = f"+ {b}" if b >= 0 else f"- {-b}"
        sign_c = f"+ {c}" if c >= 0 else f"- {-c}"
        return (
            f"Solve x^2 {sign_b}x {sign_c} = 0, take the mean of the roots, round it to {d} "
            f"places, store it as {name} and list every stored value.",
            [
                call("quadratic_roots", a=1, b=b, c=c),
                call("statistics", numbers=ref("c0.roots"), measures=["mean"]),
                call("round_number", value=ref("c1.results.mean"), digits=d),
                call("store_value", name=name, value=ref("c2.result")),
                call("list_values"),
            ],
            None,
        )
    if kind == 2:
        p, r, y = rng.randint(100, 9000), rng.randint(1, 9), rng.randint(1, 20)
        return (
            f"Compute compound interest on {p} at {r}% for {y} years, round the final amount "
            f"to whole units, get the percentage change from {p} to it, store that change as "
            f"{name}, and recall {name}.",
            [
                call("compound_growth", principal=p, annual_rate_percent=r, years=y),
                call("round_number", value=ref("c0.final_amount"), digits=0),
                call("percentage_change", old_value=p, new_value=ref("c1.result")),
                call("store_value", name=name, value=ref("c2.percent_change")),
                call("recall_value", name=name),
            ],
            None,
        )
    slot = rng.choice(["trip_km", "route_km", "leg_km", "lap_km"])
    km = float(rng.randint(1, 900))
    return (
        f"Recall {slot}, convert it from km to m, divide it by 3, round it to {d} places and "
        f"store it as {name}.",
        [
            call("recall_value", name=slot),
            call("convert_units", value=ref("c0.value"), from_unit="km", to_unit="m"),
            call("calculate", expression="{{c1.result}} / 3"),
            call("round_number", value=ref("c2.result"), digits=d),
            call("store_value", name=name, value=ref("c3.result")),
        ],
        {"memory": {slot: {"name": slot, "value": km}}},
    )


def workflow_tasks(n: int, *, seed: int = 0) -> list[Trajectory]:
    """``n`` distinct tasks of the math workflows (module docstring): five dependent calls
    each, the request deciding which tools in which order; every math tool is offered.
    Deterministic for a seed."""
    from ..envs.domains import get_domain
    from ..envs.tasks import materialize, task, turn

    domain = get_domain("math")
    toolset = domain.toolset()
    rng = random.Random(seed_from("trajsynth.train.synth.workflow", seed))
    rows: list[Trajectory] = []
    seen: set[str] = set()
    while len(rows) < n:
        kind = len(rows) % 4
        request, calls, state = _workflow(kind, rng)
        if request in seen:
            continue
        seen.add(request)
        authored = task(
            f"workflow-{kind}",
            ["dependent_calls", "long_horizon"],
            turn(request, *calls),
            initial_state=state,
        )
        row = materialize(authored, domain).to_trajectory(toolset)
        rows.append(
            row.derive(
                id=stable_id("workflow-task", request),
                task_id=f"workflow-{kind}~{stable_id(request)[:8]}",
                method="variation",
                extra={"family": f"workflow-{kind}"},
            )
        )
    return rows


def _offered(toolset: Any, example: Any, distractors: int | None, rng: random.Random) -> Any:
    if distractors is None:
        return toolset
    needed = {c.name for c in example.ground_truth.flat_calls()}
    others = sorted(t.name for t in toolset.tools if t.name not in needed)
    keep = needed | set(rng.sample(others, min(distractors, len(others))))
    return type(toolset)(
        name=toolset.name, tools=[t for t in toolset.tools if t.name in keep], format=toolset.format
    )


def env_maker(max_observation_chars: int | None = 16_000) -> Callable[[Trajectory], Any]:
    """A function row → fresh environment of the row's domain, reset-ready (built-in domains)."""
    from ..envs.factory import EnvFactory

    factory = EnvFactory({"max_observation_chars": max_observation_chars})

    def make(row: Trajectory) -> Any:
        gt = row.ground_truth or GroundTruth()
        return factory.make(row.domain, seed=gt.env_seed, initial_state=gt.initial_state)

    return make


def _final_answer(gt: GroundTruth) -> str:
    if gt.required_outputs:
        return "Done: " + "; ".join(gt.required_outputs) + "."
    return "Done."


def gold_trajectory(row: Trajectory, make_env: Callable[[Trajectory], Any]) -> Trajectory:
    """Step 4: the trajectory that follows the task's gold calls (tool messages as the
    environment formats them)."""
    gt = row.ground_truth
    if gt is None:
        raise ValueError(f"task {row.task_id} has no ground truth")
    env = make_env(row)
    env.reset(gt)
    messages: list[Message] = []
    n = 0
    try:
        for index, turn in enumerate(gt.turns):
            messages.append(Message(role="user", content=turn.request))
            if turn.kind == "clarify":
                question = turn.answer or "Could you give me the missing details?"
                messages.append(Message(role="assistant", content=question))
                messages.append(Message(role="user", content=turn.clarification or ""))
            for step in turn.steps:
                calls = []
                for c in step:
                    calls.append(
                        ToolCall(
                            id=f"call_{n}",
                            name=c.name,
                            arguments=json.dumps(c.arguments, ensure_ascii=False),
                        )
                    )
                    n += 1
                msg = Message(role="assistant", tool_calls=calls)
                obs, _, _ = env.step(msg)
                messages.append(msg)
                messages.extend(obs.to_messages(env.max_observation_chars))
            last = index == len(gt.turns) - 1
            if turn.kind == "no_tool":
                text = turn.answer or "I can answer that without a tool."
            else:
                text = _final_answer(gt) if last else "Done."
            messages.append(Message(role="assistant", content=text))
    finally:
        env.close()
    return row.derive(
        id=stable_id("gold-trajectory", row.id),
        messages=messages,
        success=True,
        reward=1.0,
        method="gold",
        parent_ids=[row.id],
    )
