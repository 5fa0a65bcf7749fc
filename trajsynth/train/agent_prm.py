"""An explicit process reward model: a step scorer trained on the step labels the pipeline
already has, used as dense step rewards in the policy update. After AgentPRM (Choudhury 2025,
"Process Reward Models for LLM Agents: Practical Framework and Directions", arXiv 2502.10325;
code ``sanjibanc/agent_prm``: a sequence classifier trained with BCE-with-logits on soft step
targets) and Xi et al. 2025 ("AgentPRM: Process Reward Models for LLM Agents via Step-Wise
Promise and Progress", arXiv 2511.08325: a step's "promise" Q^π(s_t, a_t)).

Training (``trajsynth train-prm``, :func:`train_prm`):

1) labels, one per assistant step where known (``labels``): ``steca`` — STeCa's Monte Carlo
   step values (``step_rewards`` of its rows: the value of the expert prefix and of the agent's
   deviated step, in [0, 1]; the promise of AgentPRM's MC variant); ``verifier`` — the
   verifier's outcome of each step of a row with ground truth (1 when the step matches the gold
   step at its position, :func:`~trajsynth.train.eval.step_outcomes`; ``match: tool`` checks
   only its tools); ``both`` — STeCa's
   value where it has one, the verifier's elsewhere. A step kept only as context (STeCa's
   deviated step is flagged) keeps its STeCa value but gets no verifier label;
2) split by task: a task's rows are all in training or all held out (``holdout``, by a stable
   hash of the task id), so the held-out score measures tasks the scorer never saw;
3) features of (s_t, a_t): a frozen encoder (``model``, any transformers folder; the policy's
   SFT checkpoint is the natural one) reads each row rendered with its chat template, at the
   last token of step t (:mod:`.critic`);
4) the head: an MLP with a sigmoid output, trained with BCE-with-logits on the soft labels
   (AgentPRM's loss), ``epochs`` passes of Adam;
5) evaluation on the held-out steps: AUC (label ≥ 0.5 is positive), BCE and the mean
   absolute error; the folder holds ``prm.json`` (encoder, settings, figures) and
   ``head.safetensors``.

Use in the policy update (``train-grpo --advantage prm --prm DIR``, :class:`AgentPRM`):

6) the scorer gives each assistant turn of each episode its score p_t ∈ (0, 1) as the step
   reward, and A_{i,t} = A^E_i + w·A^S_{i,t} (:func:`~trajsynth.train.credit.episode_plus_step`:
   GRPO's episode advantage plus ``weight`` × the step rewards normalised over the group's
   steps). The batch's step AUC against the verifier's step outcomes is logged when the task
   rows have ground truth.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from ..core.config import StrictModel
from ..core.errors import ConfigError, DataError
from ..core.ids import seed_from
from ..core.schema import Trajectory
from .credit import add_group_stats, episode_plus_step
from .critic import Encoder, HeadConfig, MLPHead, auc, row_spans

if TYPE_CHECKING:
    from .advantages import AdvantageStats
    from .credit import Kept
    from .rollout import Rollout

__all__ = [
    "PRM_FILE",
    "AgentPRM",
    "PRMConfig",
    "PRMResult",
    "PRMRewardConfig",
    "StepScorer",
    "step_labels",
    "train_prm",
]

PRM_FILE = "prm.json"
HEAD_FILE = "head.safetensors"

LabelSource = Literal["steca", "verifier", "both"]


class PRMConfig(StrictModel):
    """Settings of ``trajsynth train-prm``."""

    model: str = Field(description="The encoder: a transformers model folder or name.")
    labels: LabelSource = Field(
        default="both", description="Step labels: steca (MC values), verifier, or both."
    )
    match: Literal["call", "tool"] = Field(
        default="call",
        description="What a verifier label checks: the step's calls (BFCL match), or only "
        "its tools (the tool_match reward's steps).",
    )
    holdout: float = Field(default=0.2, ge=0, lt=1, description="Share of tasks held out.")
    epochs: int = Field(default=200, ge=1, description="Passes of the head over the steps.")
    head: HeadConfig = Field(default_factory=HeadConfig, description="The scorer's head.")
    max_len: int = Field(default=4096, ge=32, description="Tokens of a row read at most.")
    device: str = Field(default="auto", description="auto, cpu, cuda, mps.")
    seed: int = Field(default=0, description="Seeds the head and the split.")


class PRMResult(BaseModel):
    out: str
    train_steps: int
    holdout_steps: int
    train_tasks: int
    holdout_tasks: int
    positive_share: float = Field(description="Share of training steps labelled ≥ 0.5.")
    unreadable_rows: int = Field(
        default=0, description="Rows the encoder's template could not split into steps."
    )
    train_auc: float | None
    holdout_auc: float | None = Field(description="Held-out step AUC (None: one class only).")
    holdout_bce: float | None
    holdout_mae: float | None
    seconds: float


class PRMRewardConfig(StrictModel):
    """Settings of ``--advantage prm``."""

    path: str | None = Field(default=None, description="The PRM folder (trajsynth train-prm).")
    weight: float = Field(default=1.0, ge=0, description="w: A = A^E + w·A^S.")


# --------------------------------------------------------------------------------------
# 1) labels
# --------------------------------------------------------------------------------------


def step_labels(
    row: Trajectory, source: LabelSource = "both", match: Literal["call", "tool"] = "call"
) -> list[float | None]:
    """Step 1: a label in [0, 1] per assistant step of ``row``, None where unknown."""
    from .eval import step_outcomes

    n = len(row.assistant_steps())
    labels: list[float | None] = [None] * n
    if source in ("steca", "both") and isinstance(row.extra, dict) and "steca" in row.extra:
        for t, v in enumerate(row.step_rewards[:n]):
            if v is not None:
                labels[t] = min(1.0, max(0.0, float(v)))
    if source in ("verifier", "both") and row.ground_truth is not None and n:
        context = row.context_steps()
        for t, ok in enumerate(step_outcomes(row, row.messages, match)):
            if labels[t] is None and t not in context:
                labels[t] = ok
    return labels


def _holdout(task_id: str, share: float, seed: int) -> bool:
    """Step 2: a stable draw per task."""
    return (seed_from("prm-split", seed, task_id) % 10_000) < share * 10_000


def _featurize(
    encoder: Encoder, rows: Sequence[Trajectory], steps: Sequence[Sequence[int]]
) -> list[Any | None]:
    """Step 3: for each row, the features of the given assistant steps (at their last token);
    None for a row the encoder's chat template cannot split into its assistant steps."""
    from .template import row_messages

    seqs, where = [], []
    for k, (row, ts) in enumerate(zip(rows, steps, strict=True)):
        try:
            ids, spans = row_spans(encoder.tokenizer, row_messages(row), row.tools)
        except DataError:
            continue
        seqs.append((ids, [spans[t][1] - 1 for t in ts], list(ts)))
        where.append(k)
    out: list[Any | None] = [None] * len(rows)
    for k, f in zip(where, encoder.features(seqs), strict=True):
        out[k] = f
    return out


# --------------------------------------------------------------------------------------
# 1-5) training
# --------------------------------------------------------------------------------------


def train_prm(rows: Sequence[Trajectory], out: str | Path, cfg: PRMConfig) -> PRMResult:
    """Steps 1-5 of the module docstring."""
    import torch

    from .modeling import resolve_device

    t0 = time.perf_counter()
    out = Path(out)
    # 1) labels
    labelled = []
    for row in rows:
        if not row.messages:
            continue
        labels = step_labels(row, cfg.labels, cfg.match)
        steps = [t for t, y in enumerate(labels) if y is not None]
        if steps:
            labelled.append((row, steps, [labels[t] for t in steps]))
    if not labelled:
        raise DataError(
            f"none of the {len(rows)} rows has a step label ({cfg.labels})",
            hint="give STeCa rows (step values) or trajectories with ground truth",
        )
    # 3) features (a row the template cannot split into its steps is left out)
    device = resolve_device(cfg.device)
    encoder = Encoder.load(cfg.model, device, max_len=cfg.max_len)
    found = _featurize(encoder, [r for r, _, _ in labelled], [s for _, s, _ in labelled])
    unreadable = sum(f is None for f in found)
    labelled = [x for x, f in zip(labelled, found, strict=True) if f is not None]
    feats = [f for f in found if f is not None]
    if not labelled:
        raise DataError(f"{cfg.model}'s chat template cannot split any row into its steps")
    # 2) split by task
    held = [_holdout(r.task_id, cfg.holdout, cfg.seed) for r, _, _ in labelled]

    def stack(hold: bool) -> tuple[Any, Any]:
        xs = [f for f, h in zip(feats, held, strict=True) if h == hold]
        ys = [y for (_, _, ls), h in zip(labelled, held, strict=True) if h == hold for y in ls]
        if not xs:
            return torch.zeros((0, encoder.dim)), torch.zeros(0)
        return torch.cat(xs), torch.tensor(ys, dtype=torch.float32)

    x_train, y_train = stack(False)
    x_hold, y_hold = stack(True)
    if len(y_train) == 0:
        raise DataError("every labelled task fell in the held-out share", hint="lower --holdout")
    # 4) the head
    torch.manual_seed(cfg.seed)
    head = MLPHead(encoder.dim, cfg.head.hidden)
    opt = torch.optim.Adam(head.parameters(), lr=cfg.head.lr)
    gen = torch.Generator().manual_seed(cfg.seed)
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    for _ in range(cfg.epochs):
        order = torch.randperm(len(y_train), generator=gen)
        for s in range(0, len(order), cfg.head.batch):
            idx = order[s : s + cfg.head.batch]
            loss = bce(head(x_train[idx]).squeeze(-1), y_train[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    head.eval()
    # 5) evaluation and the folder

    def scores(x: Any) -> list[float]:
        with torch.no_grad():
            return torch.sigmoid(head(x).squeeze(-1)).tolist() if len(x) else []

    p_train, p_hold = scores(x_train), scores(x_hold)
    train_auc = auc(p_train, [y >= 0.5 for y in y_train.tolist()])
    hold_auc = auc(p_hold, [y >= 0.5 for y in y_hold.tolist()]) if len(p_hold) else None
    hold_bce = hold_mae = None
    if len(p_hold):
        with torch.no_grad():
            hold_bce = float(bce(head(x_hold).squeeze(-1), y_hold))
        hold_mae = sum(abs(p - y) for p, y in zip(p_hold, y_hold.tolist(), strict=True)) / len(
            p_hold
        )
    result = PRMResult(
        out=str(out),
        train_steps=len(y_train),
        holdout_steps=len(y_hold),
        train_tasks=len({r.task_id for (r, _, _), h in zip(labelled, held, strict=True) if not h}),
        holdout_tasks=len({r.task_id for (r, _, _), h in zip(labelled, held, strict=True) if h}),
        positive_share=float((y_train >= 0.5).float().mean()),
        unreadable_rows=unreadable,
        train_auc=train_auc,
        holdout_auc=hold_auc,
        holdout_bce=hold_bce,
        holdout_mae=hold_mae,
        seconds=time.perf_counter() - t0,
    )
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in head.state_dict().items()}, str(out / HEAD_FILE))
    encoder_path = cfg.model if not Path(cfg.model).exists() else str(Path(cfg.model).resolve())
    (out / PRM_FILE).write_text(
        json.dumps(
            {
                "kind": "trajsynth-prm",
                "encoder": encoder_path,
                "dim": encoder.dim,
                "config": cfg.model_dump(mode="json"),
                "result": result.model_dump(),
            },
            indent=2,
        )
    )
    return result


# --------------------------------------------------------------------------------------
# 6) use
# --------------------------------------------------------------------------------------


class StepScorer:
    """A trained PRM folder: p_t for every assistant step of a conversation."""

    def __init__(self, encoder: Encoder, head: Any, info: dict[str, Any]) -> None:
        self.encoder = encoder
        self.head = head.eval().requires_grad_(False)
        self.info = info
        self.unreadable = 0

    @staticmethod
    def check(path: str | Path) -> dict[str, Any]:
        """The folder's ``prm.json``, or one clear error (before any model is loaded)."""
        folder = Path(path)
        meta = folder / PRM_FILE
        if not meta.is_file() or not (folder / HEAD_FILE).is_file():
            raise ConfigError(
                f"{folder} is not a PRM folder (no {PRM_FILE} and {HEAD_FILE})",
                hint="train one with `trajsynth train-prm DATA --model ENCODER --out DIR`",
            )
        info = json.loads(meta.read_text())
        if info.get("kind") != "trajsynth-prm":
            raise ConfigError(f"{meta} was not written by trajsynth train-prm")
        return dict(info)

    @classmethod
    def load(cls, path: str | Path, device: str, *, max_steps: int = 8) -> StepScorer:
        from safetensors.torch import load_file

        info = cls.check(path)
        max_len = int(info["config"].get("max_len", 4096))
        encoder = Encoder.load(info["encoder"], device, max_steps=max_steps, max_len=max_len)
        if encoder.dim != info["dim"]:
            raise ConfigError(f"{path}: its encoder {info['encoder']} has changed size")
        head = MLPHead(encoder.dim, int(info["config"]["head"]["hidden"]))
        head.load_state_dict(load_file(str(Path(path) / HEAD_FILE)))
        return cls(encoder, head, info)

    def score(self, rows: Sequence[Trajectory]) -> list[list[float]]:
        """p_t per assistant step of each row (0.5, no opinion, for every step of a row the
        encoder's template cannot split into its steps; counted in ``unreadable``)."""
        import torch

        steps = [list(range(len(r.assistant_steps()))) for r in rows]
        out: list[list[float]] = [[] for _ in rows]
        live = [i for i, s in enumerate(steps) if s]
        feats = _featurize(self.encoder, [rows[i] for i in live], [steps[i] for i in live])
        with torch.no_grad():
            for i, f in zip(live, feats, strict=True):
                if f is None:
                    self.unreadable += 1
                    out[i] = [0.5] * len(steps[i])
                else:
                    out[i] = torch.sigmoid(self.head(f).squeeze(-1)).tolist()
        return out


class AgentPRM:
    """Step 6 as the loop's estimator."""

    name = "prm"

    def __init__(self, scorer: StepScorer, cfg: PRMRewardConfig, *, scale: bool = True) -> None:
        self.scorer = scorer
        self.cfg = cfg
        self.scale = scale

    def advantages(
        self, groups: list[list[Rollout]], stats: AdvantageStats, metrics: dict[str, float]
    ) -> Kept:
        from .eval import step_outcomes

        kept: Kept = []
        all_scores: list[float] = []
        all_labels: list[bool] = []
        for group in groups:
            rows = [ep.row.derive(messages=ep.messages) for ep in group]
            scores = self.scorer.score(rows)
            for ep, p in zip(group, scores, strict=True):
                all_scores += p
                if ep.row.ground_truth is not None:
                    level = self.scorer.info.get("config", {}).get("match", "call")
                    all_labels += [y >= 0.5 for y in step_outcomes(ep.row, ep.messages, level)]
            adv = episode_plus_step(
                [ep.reward for ep in group], scores, weight=self.cfg.weight, scale=self.scale
            )
            if adv is not None:
                kept += list(zip(group, adv, strict=True))
        metrics["prm_score_mean"] = sum(all_scores) / max(1, len(all_scores))
        metrics["prm_unreadable"] = float(getattr(self.scorer, "unreadable", 0))
        if len(all_labels) == len(all_scores):
            batch_auc = auc(all_scores, all_labels)
            if batch_auc is not None:
                metrics["prm_step_auc"] = batch_auc
        add_group_stats(groups, kept, stats)
        return kept

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None
