"""``synthetic``: seeded, structurally realistic trajectory rows for tests and benchmarks.

These rows are *not* training data: their tools are not executable and their outcomes are
drawn at random. They exist so that the store, the runner and the quality stages can be
exercised and benchmarked at any size without an LLM (e.g. `bench/quality.py` at a million
rows, the crash test of the runner). Row ``i`` depends only on (seed, i), so a source resumed
from an offset makes exactly the rows it would have made.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

from pydantic import Field

from ...core.batch import to_batch
from ...core.ids import seed_from, stable_id
from ...core.schema import Message, ToolCall, Trajectory
from ..context import Context
from ..kinds import Output, SourceStage, StageConfig
from ..registry import register

__all__ = ["Synthetic", "synthetic_row"]

# domain names are prefixed so they never collide with the executable built-in domains
# (verify would replay these fake calls against the real travel environment and fail them)
_TOOLS = {
    "synthetic_travel": [
        ("search_flights", {"origin": "string", "destination": "string", "date": "string"}),
        ("book_flight", {"flight_id": "string", "passenger": "string"}),
        (
            "convert_currency",
            {"amount": "number", "from_currency": "string", "to_currency": "string"},
        ),
        ("search_hotels", {"city": "string", "nights": "integer"}),
    ],
    "synthetic_files": [
        ("list_dir", {"path": "string"}),
        ("read_file", {"path": "string"}),
        ("write_file", {"path": "string", "content": "string"}),
        ("move_file", {"src": "string", "dst": "string"}),
    ],
    "synthetic_commerce": [
        ("find_order", {"order_id": "string"}),
        ("return_item", {"order_id": "string", "item_id": "string"}),
        ("exchange_item", {"order_id": "string", "item_id": "string", "new_item_id": "string"}),
        ("get_user", {"user_id": "string"}),
    ],
}
_CITIES = ["Paris", "Lisbon", "Tokyo", "Denver", "Oslo", "Cairo", "Lima", "Seoul", "Austin"]
_NAMES = ["Ada", "Bo", "Chen", "Dara", "Eli", "Farah", "Gus", "Hana"]
_VERBS = ["Please", "Could you", "I need you to", "Help me", "Can you"]
_CAPS = [
    "single_call",
    "multi_call",
    "dependent_calls",
    "parallel_calls",
    "optional_params",
    "error_recovery",
    "long_horizon",
]


def _tools_json(domain: str) -> list[dict]:
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": f"{name.replace('_', ' ')}.",
                "parameters": {
                    "type": "object",
                    "properties": {p: {"type": t} for p, t in params.items()},
                    "required": list(params),
                },
            },
        }
        for name, params in _TOOLS[domain]
    ]


_TOOLS_JSON = {d: _tools_json(d) for d in _TOOLS}


def _value(rng: random.Random, kind: str) -> object:
    if kind == "number":
        return round(rng.uniform(1, 1000), 2)
    if kind == "integer":
        return rng.randint(1, 14)
    pick = rng.randrange(3)
    if pick == 0:
        return rng.choice(_CITIES)
    if pick == 1:
        return f"{rng.choice(['FL', 'OR', 'IT', 'U'])}{rng.randint(100, 99998)}"
    return f"/home/{rng.choice(_NAMES).lower()}/{rng.randrange(500)}.txt"


def synthetic_row(
    i: int,
    seed: int,
    *,
    success_rate: float = 0.5,
    duplicate_rate: float = 0.0,
    ctx: Context | None = None,
) -> Trajectory:
    """Row ``i`` of the synthetic stream for ``seed``.

    With probability ``duplicate_rate`` the row re-draws the content of an earlier row (a
    planted duplicate with a new id), so dedup has something real to find.
    """
    rng = random.Random(seed_from("synthetic", seed, i))
    content_index = i
    if i > 0 and rng.random() < duplicate_rate:
        content_index = rng.randrange(i)
    crng = random.Random(seed_from("synthetic-content", seed, content_index))
    domain = crng.choice(list(_TOOLS))
    tools = _TOOLS[domain]
    n_calls = crng.randint(1, 8)
    messages = [Message(role="system", content="You are a helpful assistant with tools.")]
    calls_desc = []
    steps = []
    for k in range(n_calls):
        name, params = crng.choice(tools)
        args = {p: _value(crng, t) for p, t in params.items()}
        steps.append((name, args))
        calls_desc.append(f"{name.replace('_', ' ')} for {next(iter(args.values()))}")
        del k
    goal = f"{crng.choice(_VERBS)} " + ", then ".join(calls_desc) + "."
    messages.append(Message(role="user", content=goal))
    for k, (name, args) in enumerate(steps):
        call_id = f"call_{k}"
        messages.append(
            Message(
                role="assistant",
                reasoning=f"Next I will {name.replace('_', ' ')}.",
                tool_calls=[ToolCall(id=call_id, name=name, arguments=json.dumps(args))],
            )
        )
        messages.append(
            Message(
                role="tool",
                tool_call_id=call_id,
                name=name,
                content=json.dumps({"status": "ok", "result_id": f"r{k}"}),
            )
        )
    success = bool(rng.random() < success_rate)
    messages.append(Message(role="assistant", content="Done." if success else "I could not."))
    caps = sorted(
        {_CAPS[0] if n_calls == 1 else _CAPS[1], *crng.sample(_CAPS[2:-1], crng.randrange(3))}
        | ({"long_horizon"} if n_calls >= 5 else set())
    )
    task_id = stable_id("synthetic-task", seed, content_index)
    prov = (
        ctx.provenance(method="synthetic", seed=seed)
        if ctx
        else {"method": "synthetic", "seed": seed}
    )
    return Trajectory(
        id=stable_id("synthetic", seed, i),
        task_id=task_id,
        goal=goal,
        domain=domain,
        capabilities=caps,
        tools=_TOOLS_JSON[domain],
        messages=messages,
        success=success,
        **prov,
    )


class SyntheticConfig(StageConfig):
    rows: int = Field(default=1000, ge=0, description="Rows to make.")
    success_rate: float = Field(default=0.5, ge=0, le=1, description="Share marked successful.")
    duplicate_rate: float = Field(
        default=0.0, ge=0, le=1, description="Share of rows that repeat an earlier row's content."
    )
    batch_rows: int = Field(default=1000, ge=1, description="Rows per yielded batch.")


@register
class Synthetic(SourceStage[SyntheticConfig]):
    """Seeded synthetic trajectory rows for tests and benchmarks (not training data)."""

    name = "synthetic"
    writes = ("success",)

    def expected_rows(self) -> int | None:
        return self.config.rows

    def generate(self, ctx: Context, offset: int = 0) -> Iterator[Output]:
        cfg = self.config
        for start in range(offset, cfg.rows, cfg.batch_rows):
            stop = min(start + cfg.batch_rows, cfg.rows)
            yield to_batch(
                synthetic_row(
                    i,
                    ctx.seed,
                    success_rate=cfg.success_rate,
                    duplicate_rate=cfg.duplicate_rate,
                    ctx=ctx,
                )
                for i in range(start, stop)
            )
