"""BFCL, built in: a model's accuracy on the Berkeley Function Calling Leaderboard's
single-turn categories (Patil et al., "The Berkeley Function Calling Leaderboard", v4;
``bfcl_eval/data``), scored with trajsynth's own port of BFCL's AST checker
(:func:`~trajsynth.envs.verifiers.bfcl_check`).

The data comes from the ``bfcl-eval`` wheel (``make install`` installs it without its
dependencies; nothing is downloaded at run time), or from any folder laid out like its
``data/`` (``data_dir``). For each category asked (:data:`CATEGORIES`):

1) the entries: ``BFCL_v4_<category>.json`` and, beside it, ``possible_answer/`` (the
   irrelevance categories have none: no call is the answer). With ``limit``, ``limit``
   entries evenly spread over the file (the files are ordered by topic, so its first N
   entries would be one topic), the same ones on every run;
2) the prompt, in function-calling form as BFCL's FC handlers build it: the entry's first
   turn of messages and its functions as OpenAI tools (names ``.`` → ``_``, BFCL types cast
   to JSON Schema, :mod:`trajsynth.envs.importers.bfcl`), rendered by the model's own chat
   template (for a local checkpoint; an endpoint renders its own). A turn without a system
   message gets ``system`` when one is given, else the template's default;
3) one assistant message, greedy by default, all prompts of a run in flight at once (a local
   model generates them in batches of similar length, sharing prefixes); calls are read by
   the shared parser, so any call format the parser knows counts;
4) the verdict: :func:`~trajsynth.envs.verifiers.bfcl_check` for the category (simple: one
   call matching the gold with BFCL's acceptable values; multiple: one call, of the right
   function; parallel: the gold calls in any order; irrelevance: no call). An output with
   no parseable call, a request that failed, or an entry whose functions could not be
   converted is wrong, never skipped; each wrong answer is counted by its reason
   (``wrong_value``, ``no_call``, ``format_error`` ...);
5) the report: accuracy per category with its count and 95% bootstrap interval, the mean
   over :data:`MEAN_OVER` (when all of them were run) with its interval (questions resampled
   within each category), and each answer when asked. At 20 questions a category one
   question is 0.05 and the interval is about ±0.2 wide: read small differences with it;
6) against a baseline (:func:`compare_answers`: an earlier run's answers, ``eval
   --baseline``): on the questions both runs answered, each category's difference and the
   mean's, with a paired 95% bootstrap interval (a question both get right, or both wrong,
   adds no noise), narrower than two runs' intervals side by side. It resamples the
   questions, not the training: two SFT runs on nearly the same rows differ by more.

:func:`single_turn_index` lists the names of every single-turn function and the text of every
single-turn question, so that a training set can be checked for contamination
(:func:`contamination`): BFCL's single-turn questions, functions and answers are the
benchmark and must never be trained on.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from ..core.errors import ConfigError, DataError, InputNotFoundError
from ..envs.importers.bfcl import (
    INSTALL_HINT,
    BfclEntry,
    SingleTurnIndex,
    bfcl_data_dir,
    normal_text,
    read_entries,
    single_turn_index,
)
from ..envs.verifiers import bfcl_check
from ..llm.base import FatalEndpointError
from ..quality.intervals import mean_interval, paired_difference

__all__ = [
    "CATEGORIES",
    "DEFAULT_CATEGORIES",
    "MEAN_OVER",
    "BfclConfig",
    "BfclReport",
    "CategoryScore",
    "Difference",
    "SingleTurnIndex",
    "bfcl_data_dir",
    "compare_answers",
    "contamination",
    "evaluate_bfcl",
    "load_category",
    "read_answers",
    "row_contamination",
    "single_turn_index",
]

#: the single-turn categories ``--categories`` accepts (python, plus Java and JavaScript)
CATEGORIES = (
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
    "irrelevance",
    "live_irrelevance",
    "live_relevance",
    "simple_java",
    "simple_javascript",
)
#: what runs when no category is named
DEFAULT_CATEGORIES = (
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_multiple",
    "irrelevance",
    "live_irrelevance",
)
#: the categories the report's ``mean`` averages (the non-live AST categories and live_simple)
MEAN_OVER = ("simple_python", "multiple", "parallel", "parallel_multiple", "live_simple")


def _check_categories(categories: Iterable[str]) -> list[str]:
    cats = list(dict.fromkeys(c.strip() for c in categories if c.strip()))
    unknown = [c for c in cats if c not in CATEGORIES]
    if unknown:
        raise ConfigError(
            f"unknown BFCL categor{'y' if len(unknown) == 1 else 'ies'}: {', '.join(unknown)}",
            hint=f"choose from {', '.join(CATEGORIES)}",
        )
    if not cats:
        raise ConfigError("no BFCL category given", hint=f"choose from {', '.join(CATEGORIES)}")
    return cats


def _spread(n: int, limit: int | None) -> list[int]:
    """``limit`` indices evenly spread over ``range(n)`` (all of them without a limit)."""
    if limit is None or limit >= n:
        return list(range(n))
    return sorted({(i * n) // limit for i in range(limit)})


def load_category(
    category: str, *, data_dir: str | Path | None = None, limit: int | None = None
) -> list[BfclEntry]:
    """Step 1: the category's entries (``limit`` of them, evenly spread)."""
    (category,) = _check_categories([category])
    file = bfcl_data_dir(data_dir) / f"BFCL_v4_{category}.json"
    if not file.is_file():
        raise InputNotFoundError(f"{file} is missing from the BFCL data", hint=INSTALL_HINT)
    entries = list(read_entries(file))
    return [entries[i] for i in _spread(len(entries), limit)]


class BfclConfig(BaseModel):
    """What :func:`evaluate_bfcl` runs."""

    categories: list[str] = Field(
        default_factory=lambda: list(DEFAULT_CATEGORIES), description="Categories to score."
    )
    limit: int | None = Field(
        default=None, ge=1, description="Entries per category, evenly spread (none: all)."
    )
    data_dir: str | None = Field(
        default=None, description="A BFCL data folder (default: the bfcl-eval wheel's)."
    )
    temperature: float = Field(default=0.0, ge=0, description="0: greedy.")
    max_new_tokens: int = Field(default=256, ge=1, description="Tokens per answer.")
    system: str | None = Field(
        default=None,
        description="System message for entries without one (none: the template's default).",
    )
    concurrency: int = Field(default=256, ge=1, description="Requests in flight at once.")


class CategoryScore(BaseModel):
    """One category's result."""

    accuracy: float
    correct: int
    total: int
    interval: tuple[float | None, float | None] = Field(
        default=(None, None), description="95% bootstrap interval of the accuracy."
    )
    errors: dict[str, int] = Field(
        default_factory=dict, description="Wrong answers by reason (wrong_value, no_call ...)."
    )


class Difference(BaseModel):
    """One category (or the mean) against a baseline run, on the questions both answered."""

    questions: int = Field(description="Questions both runs answered.")
    baseline: float = Field(description="The baseline's accuracy on them.")
    accuracy: float = Field(description="This run's accuracy on them.")
    difference: float = Field(description="accuracy − baseline.")
    interval: tuple[float | None, float | None] = Field(
        default=(None, None), description="Paired 95% bootstrap interval of the difference."
    )


class BfclReport(BaseModel):
    """Accuracy per category, the mean over :data:`MEAN_OVER`, and (optionally) answers."""

    benchmark: str = "bfcl"
    model: str = ""
    limit: int | None = None
    categories: dict[str, CategoryScore] = Field(default_factory=dict)
    mean: float | None = Field(
        default=None, description="Mean accuracy over MEAN_OVER (None unless all were run)."
    )
    mean_interval: tuple[float | None, float | None] = Field(
        default=(None, None),
        description="95% bootstrap interval of the mean (questions resampled per category).",
    )
    seconds: float = 0.0
    data_dir: str = ""
    baseline: str | None = Field(default=None, description="The answers compared against.")
    versus: dict[str, Difference] = Field(
        default_factory=dict,
        description="Against the baseline: category (and mean) → difference (step 6).",
    )
    answers: list[dict[str, Any]] = Field(default_factory=list, exclude=True)

    def accuracies(self) -> dict[str, float]:
        """category → accuracy, plus ``mean`` when known."""
        out = {c: s.accuracy for c, s in self.categories.items()}
        if self.mean is not None:
            out["mean"] = self.mean
        return out

    def intervals(self) -> dict[str, tuple[float | None, float | None]]:
        """category → 95% interval of its accuracy, plus ``mean`` when known."""
        out = {c: s.interval for c, s in self.categories.items()}
        if self.mean is not None:
            out["mean"] = self.mean_interval
        return out


@dataclass
class _Job:
    category: str
    entry: BfclEntry
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    size: int


def _job(category: str, entry: BfclEntry, system: str | None) -> _Job:
    """Step 2: the prompt of one entry."""
    messages = [dict(m) for m in (entry.turns[0] if entry.turns else [])]
    if system and not any(m.get("role") == "system" for m in messages):
        messages.insert(0, {"role": "system", "content": system})
    tools = entry.tools.to_openai() if entry.error is None else []
    size = len(json.dumps(messages)) + len(json.dumps(tools))
    return _Job(category, entry, messages, tools, size)


def _verdict(job: _Job, result: Any) -> tuple[bool, str | None, dict[str, Any]]:
    """Step 4: (correct, reason when wrong, the answer as recorded)."""
    entry = job.entry
    answer: dict[str, Any] = {"id": entry.id, "category": job.category}
    if entry.error is not None:
        return False, "unconverted_entry", {**answer, "error": entry.error}
    if result is None or isinstance(result, BaseException) or not result.choices:
        error = str(result) if isinstance(result, BaseException) else getattr(result, "error", "")
        return False, "request_failed", {**answer, "error": error or "no answer"}
    choice = result.choices[0]
    calls = choice.message.tool_calls
    answer.update(
        raw=choice.raw if choice.raw is not None else choice.message.content,
        calls=[{"name": c.name, "arguments": c.arguments} for c in calls],
    )
    if choice.format_errors and not calls:
        return False, "format_error", {**answer, "format_errors": choice.format_errors}
    res = bfcl_check(calls, entry.gold[0] if entry.gold else [], entry.tools, job.category)
    if res:
        return True, None, answer
    return False, res.category or "wrong", {**answer, "reason": res.detail}


async def _run(
    client: Any,
    jobs: list[_Job],
    cfg: BfclConfig,
    progress: Callable[[int], None] | None,
) -> list[Any]:
    """Step 3: one answer per job, all in flight (bounded by ``concurrency``)."""
    gate = asyncio.Semaphore(cfg.concurrency)

    async def one(job: _Job) -> Any:
        async with gate:
            try:
                return await client.chat(
                    job.messages,
                    job.tools or None,
                    temperature=cfg.temperature,
                    max_tokens=cfg.max_new_tokens,
                    seed=0,
                )
            except FatalEndpointError:  # fails every request alike: one message, not N
                raise
            except Exception as exc:  # a failed request is a wrong answer, not a crash
                return exc
            finally:
                if progress is not None:
                    progress(1)

    # similar lengths side by side, so a local model's batches pad little
    order = sorted(range(len(jobs)), key=lambda i: jobs[i].size)
    results = await asyncio.gather(*(one(jobs[i]) for i in order))
    out: list[Any] = [None] * len(jobs)
    for i, r in zip(order, results, strict=True):
        out[i] = r
    return out


def evaluate_bfcl(
    client: Any,
    cfg: BfclConfig | None = None,
    *,
    model: str = "",
    progress: Callable[[int], Callable[[int], None]] | None = None,
) -> BfclReport:
    """Score ``client`` (anything with the llm client's ``chat`` coroutine: a local
    checkpoint, an endpoint, the simulator) on BFCL. ``progress(total)`` is called once
    with the number of prompts and returns a per-answer callback."""
    cfg = cfg or BfclConfig()
    cats = _check_categories(cfg.categories)
    data = bfcl_data_dir(cfg.data_dir)
    started = time.perf_counter()
    jobs = [
        _job(cat, entry, cfg.system)
        for cat in cats
        for entry in load_category(cat, data_dir=data, limit=cfg.limit)
    ]
    tick = progress(len(jobs)) if progress is not None else None
    results = _arun(_run(client, jobs, cfg, tick))
    report = BfclReport(model=model, limit=cfg.limit, data_dir=str(data))
    tallies: dict[str, list[bool]] = {c: [] for c in cats}
    reasons: dict[str, Counter[str]] = {c: Counter() for c in cats}
    for job, result in zip(jobs, results, strict=True):
        ok, reason, answer = _verdict(job, result)
        tallies[job.category].append(ok)
        if reason:
            reasons[job.category][reason] += 1
        report.answers.append({**answer, "correct": ok})
    for cat in cats:
        marks = tallies[cat]
        report.categories[cat] = CategoryScore(
            accuracy=round(sum(marks) / len(marks), 4) if marks else 0.0,
            correct=sum(marks),
            total=len(marks),
            interval=mean_interval(marks)[1],
            errors=dict(reasons[cat].most_common()),
        )
    if all(c in report.categories for c in MEAN_OVER):
        report.mean = round(
            sum(report.categories[c].accuracy for c in MEAN_OVER) / len(MEAN_OVER), 4
        )
        report.mean_interval = stratified_mean_interval([tallies[c] for c in MEAN_OVER])
    report.seconds = round(time.perf_counter() - started, 1)
    return report


def stratified_mean_interval(
    groups: Sequence[Sequence[float]], *, resamples: int = 10_000, seed: int = 0
) -> tuple[float | None, float | None]:
    """The 95% percentile-bootstrap interval of the mean of the groups' means (accuracies, or
    paired per-question differences), each group's answers resampled within it (the
    categories keep their sizes, as the benchmark does); (None, None) when a group has fewer
    than two answers."""
    if not groups or any(len(g) < 2 for g in groups):
        return (None, None)
    rng = np.random.default_rng(seed)
    means = np.zeros(resamples)
    for g in groups:
        x = np.asarray(g, dtype=np.float64)
        means += x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
    means /= len(groups)
    low, high = np.percentile(means, [2.5, 97.5])
    return round(float(low), 4) + 0.0, round(float(high), 4) + 0.0  # never -0.0


def read_answers(path: str | Path) -> list[dict[str, Any]]:
    """A run's answers as ``eval --benchmark bfcl --episodes`` writes them (each with its
    ``id``, ``category`` and ``correct``); one clear error for anything else."""
    path = Path(path)
    if not path.is_file():
        raise InputNotFoundError(f"no answers file at {path}")
    try:
        rows = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{path} is not JSON: {exc}") from None
    if not isinstance(rows, list) or not all(
        isinstance(r, dict) and {"id", "category", "correct"} <= r.keys() for r in rows
    ):
        raise DataError(
            f"{path} is not a BFCL answers file",
            hint="give the --episodes file of an earlier `trajsynth eval --benchmark bfcl`",
        )
    return rows


def compare_answers(
    answers: Sequence[Mapping[str, Any]], baseline: Sequence[Mapping[str, Any]]
) -> dict[str, Difference]:
    """Step 6: per category the two runs' accuracies on the questions both answered (paired
    by question id) and the difference's paired bootstrap interval; ``mean`` over
    :data:`MEAN_OVER` when both runs answered every one of them (each category's
    per-question differences resampled within it). Raises when no question is shared."""
    before = {str(a["id"]): bool(a["correct"]) for a in baseline}
    pairs: dict[str, list[tuple[bool, bool]]] = {}
    for a in answers:
        key = str(a["id"])
        if key in before:
            pairs.setdefault(str(a["category"]), []).append((bool(a["correct"]), before[key]))
    if not pairs:
        raise DataError(
            "the two runs share no question",
            hint="compare runs of the same categories (and the same --limit)",
        )
    out: dict[str, Difference] = {}
    for cat, both in pairs.items():
        now, then = [float(x) for x, _ in both], [float(y) for _, y in both]
        diff, interval = paired_difference(now, then)
        out[cat] = Difference(
            questions=len(both),
            baseline=round(sum(then) / len(then), 4),
            accuracy=round(sum(now) / len(now), 4),
            difference=diff or 0.0,
            interval=interval,
        )
    if all(c in out for c in MEAN_OVER):
        groups = [[x - y for x, y in pairs[c]] for c in MEAN_OVER]
        out["mean"] = Difference(
            questions=sum(len(pairs[c]) for c in MEAN_OVER),
            baseline=round(sum(out[c].baseline for c in MEAN_OVER) / len(MEAN_OVER), 4),
            accuracy=round(sum(out[c].accuracy for c in MEAN_OVER) / len(MEAN_OVER), 4),
            difference=round(sum(out[c].difference for c in MEAN_OVER) / len(MEAN_OVER), 4),
            interval=stratified_mean_interval(groups),
        )
    return out


def _arun(coro: Any) -> Any:
    """Run a coroutine from synchronous code, closing the clients' connections after."""
    from ..llm.client import aclose

    async def main() -> Any:
        try:
            return await coro
        finally:
            await aclose()

    return asyncio.run(main())


# --------------------------------------------------------------------------------------
# contamination: BFCL's single-turn questions and functions never enter training data
# --------------------------------------------------------------------------------------


def row_contamination(row: Any, index: SingleTurnIndex) -> tuple[set[str], set[str]]:
    """The BFCL single-turn function names among one row's tools and calls, and the BFCL
    single-turn questions among its user messages and goal (compared as :func:`normal_text`)."""
    names: set[str] = set()
    questions: set[str] = set()
    for tool in row.tools or []:
        fn = tool.get("function", tool) if isinstance(tool, dict) else {}
        if fn.get("name") in index.names:
            names.add(fn["name"])
    for m in row.messages:
        names.update(c.name for c in m.tool_calls if c.name in index.names)
        if m.role == "user" and m.content:
            text = normal_text(m.content)
            if text in index.questions:
                questions.add(text)
    goal = normal_text(row.goal or "")
    if goal in index.questions:
        questions.add(goal)
    return names, questions


def contamination(rows: Iterable[Any], index: SingleTurnIndex) -> dict[str, Any]:
    """BFCL single-turn function names and questions found in ``rows``: ``{"count" (names
    and questions found), "rows" (rows with either), "names", "questions"}``."""
    names: set[str] = set()
    questions: set[str] = set()
    hit = 0
    for row in rows:
        n, q = row_contamination(row, index)
        hit += bool(n or q)
        names |= n
        questions |= q
    return {
        "count": len(names) + len(questions),
        "rows": hit,
        "names": sorted(names),
        "questions": sorted(questions)[:20],
    }
