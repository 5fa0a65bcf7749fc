"""``qa_tasks``: question-answering tasks over a search domain (Search-R1's task family:
questions whose answer is a short string, found by searching a document collection).

Each question of ``questions`` (a JSONL file, :func:`trajsynth.envs.search.load_questions`:
``{"id", "question", "answer", "hops", "docs"}``; ``trajsynth.envs.search.tau_collection``
writes one from tau-bench's retail database) becomes a task row of the search domain
``domain`` (``defaults.env.search``): the question is the request; the gold is one
``search`` per hop — the question itself first, then the title of each further document the
answer goes through (a multi-hop question names only its first entity) — and a final answer
``<answer>…</answer>``; ``required_outputs`` holds the answer, so every verifier checks it
(outputs layer) and GRPO can reward it by exact match or token F1 (``--reward answer_em`` /
``answer_f1``). Capabilities: ``single_call`` (one hop) or ``dependent_calls`` (several),
and ``multi_hop``; ``extra``: the answers, hops and supporting documents.
"""

from __future__ import annotations

from collections.abc import Iterator

from pydantic import Field

from ...core.batch import to_batch
from ...core.ids import stable_id
from ...core.schema import Trajectory
from ...core.task import GoldCall, GoldTurn, GroundTruth
from ...envs.search import document_title, load_questions
from ..context import Context
from ..kinds import Output, SourceStage, StageConfig
from ..registry import register

__all__ = ["QATasks", "QATasksConfig"]


class QATasksConfig(StageConfig):
    questions: str = Field(description="JSONL file of questions (id, question, answer, docs).")
    domain: str = Field(description="The search domain (a name in defaults.env.search).")
    n: int | None = Field(None, ge=1, description="At most this many questions (in file order).")


@register
class QATasks(SourceStage[QATasksConfig]):
    """Question-answering tasks with verifiable answers over a search domain."""

    name = "qa_tasks"

    def generate(self, ctx: Context, offset: int = 0) -> Iterator[Output]:
        cfg = self.config
        questions = load_questions(cfg.questions)[: cfg.n]
        folder = ctx.envs.config.search.get(cfg.domain)
        if folder is None:
            from ...core.errors import ConfigError

            raise ConfigError(
                f"qa_tasks: {cfg.domain!r} is not a search domain",
                hint="name it in defaults.env.search: {name: folder of documents}",
            )
        tools = ctx.envs.toolset(cfg.domain).to_openai()
        rows = []
        for q in questions[offset:]:
            queries = [q.question] + [
                document_title(folder, d) or d.split("-", 1)[-1] for d in q.docs[1:]
            ]
            steps = [[GoldCall(name="search", arguments={"query": s})] for s in queries]
            gt = GroundTruth(
                turns=[
                    GoldTurn(
                        request=q.question,
                        kind="tool",
                        steps=steps,
                        answer=f"<answer>{q.answers[0]}</answer>",
                    )
                ],
                required_outputs=[q.answers[0]],
                extra={"answers": q.answers},
            )
            caps = ["single_call"] if q.hops <= 1 else ["dependent_calls", "multi_hop"]
            rows.append(
                Trajectory(
                    id=stable_id("qa_tasks", cfg.domain, q.id),
                    task_id=f"qa-{cfg.domain}-{q.id}",
                    goal=q.question,
                    domain=cfg.domain,
                    env_version=ctx.envs.version(cfg.domain),
                    capabilities=caps,
                    ground_truth=gt,
                    tools=tools,
                    extra={"answers": q.answers, "hops": q.hops, "docs": q.docs},
                    **ctx.provenance(method="qa_tasks"),
                )
            )
        if rows:
            yield to_batch(rows)
