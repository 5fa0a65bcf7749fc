"""Training commands: ``train-sft``, ``train-grpo``, ``train-prm``, ``eval``.

torch and transformers are imported inside the commands, so ``trajsynth --help`` stays fast;
without the ``train`` extra each command prints one install line and exits 1.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from pydantic import ValidationError
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..core.errors import ConfigError, InputNotFoundError
from . import app
from ._common import Quiet, console, err_console, live_console

INSTALL_LINE = "the train extra is not installed: pip install 'trajsynth[train]'"

SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="KEY=VALUE",
        help="Any other setting (e.g. tiny.hidden_size=256); repeatable.",
    ),
]
#: the panels options are grouped in (``--help``)
TRAINING = "Training"
HARDWARE = "Hardware"
CHECKPOINTS = "Checkpoints"
CREDIT = "Credit assignment"
MODEL = "Model"
EPISODES = "Episodes"
BENCHMARK = "Benchmark"
_DEVICE = typer.Option(
    metavar="DEVICE", help="auto, cpu, cuda (or cuda:N) or mps.", rich_help_panel=HARDWARE
)
Device = Annotated[str, _DEVICE]
OptionalDevice = Annotated[str | None, _DEVICE]
Seed = Annotated[int | None, typer.Option(help="Seed.", rich_help_panel=TRAINING)]
Resume = Annotated[
    bool | None,
    typer.Option(
        "--resume/--no-resume", help="Resume from OUT/checkpoint.", rich_help_panel=CHECKPOINTS
    ),
]
Precision = Literal["auto", "bf16", "fp32"]


def _require_train_extra() -> None:
    """One install line and exit 1 when torch or transformers cannot be imported (checked
    without importing them, so a user error is still reported fast)."""
    import importlib.util

    for name in ("torch", "transformers"):
        try:
            missing = name in sys.modules and sys.modules[name] is None
            missing = missing or importlib.util.find_spec(name) is None
        except (ImportError, ValueError):
            missing = True
        if missing:
            err_console.print(INSTALL_LINE, markup=False, highlight=False)
            raise SystemExit(1)


def _model_folder(model: str | Path) -> str:
    """``--model`` (a registered name, a folder or a hub id) → ``tiny`` or a checked folder,
    preparing a registered model on first use."""
    from ..llm.models import MODELS, model_status, resolve_model

    name = str(model)
    if name in MODELS and model_status(name) == "not prepared":
        err_console.print(f"preparing {name} (once; `trajsynth models pull {name}`) ...")
    return resolve_model(name)


def _settings(values: dict[str, Any], sets: list[str] | None) -> dict[str, Any]:
    """Options given on the command line, then ``--set a.b=VALUE`` (YAML values) on top."""
    import yaml

    out = {k: v for k, v in values.items() if v is not None}
    for item in sets or []:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE")
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {item!r}: {part} is not a group of settings")
        node[parts[-1]] = yaml.safe_load(raw)
    return out


def _config(cls: Any, data: dict[str, Any]) -> Any:
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        msg = "unknown setting" if err["type"] == "extra_forbidden" else err["msg"]
        msg = msg.removeprefix("Value error, ")  # a validator's own message
        raise ConfigError(f"{where}: {msg}" if where else msg) from None


def _records(path: Path, what: str) -> list[Any]:
    from ..store.shards import read_records

    if not path.exists():
        raise InputNotFoundError(f"{what} {path} does not exist")
    return read_records(path)


class RichProgress:
    """The trainers' progress protocol as a rich progress bar (one line per report when the
    output is not a terminal)."""

    def __init__(self, keys: tuple[str, ...], quiet: bool = False) -> None:
        self.keys = keys
        self.quiet = quiet
        self.live = err_console.is_terminal and not quiet
        self.bar = Progress(
            TextColumn("[bold]{task.description}[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[metrics]}"),
            TimeElapsedColumn(),
            console=live_console() if self.live else err_console,
            disable=not self.live,
        )
        self.task: Any = None

    def _fmt(self, metrics: dict[str, float]) -> str:
        parts = []
        for k in self.keys:
            if k in metrics:
                v = metrics[k]
                parts.append(f"{k} {v:,.0f}" if abs(v) >= 1000 else f"{k} {v:.4g}")
        return "  ".join(parts)

    def start(self, total: int, description: str, done: int = 0) -> None:
        self.bar.start()
        self.task = self.bar.add_task(description, total=total, completed=done, metrics="")

    def update(self, step: int, metrics: dict[str, float]) -> None:
        text = self._fmt(metrics)
        self.bar.update(self.task, completed=step, metrics=text)
        if not self.live and not self.quiet:
            err_console.print(f"step {step}: {text}")

    def note(self, message: str) -> None:
        if not self.quiet:
            err_console.print(message)

    def close(self) -> None:
        self.bar.stop()


@app.command("train-sft", rich_help_panel="Training")
def train_sft_command(
    data: Annotated[Path, typer.Argument(help="Trajectory shards (file or folder).")],
    # typer marks a required option by the default ``...``
    out: Annotated[Path, typer.Option("--out", "-o", help="Model folder to write.")] = ...,  # type: ignore[assignment]
    model: Annotated[
        str,
        typer.Option(
            metavar="MODEL",
            help="A model name (`trajsynth models list`: tiny, smollm2-135m), a model "
            "folder, or a hub id.",
        ),
    ] = "tiny",
    epochs: Annotated[
        float | None, typer.Option(help="Passes over the data.", rich_help_panel=TRAINING)
    ] = None,
    lr: Annotated[
        float | None, typer.Option(help="Peak learning rate.", rich_help_panel=TRAINING)
    ] = None,
    lora_r: Annotated[
        int | None,
        typer.Option(
            help="LoRA rank (0: full fine-tuning; pretrained models).", rich_help_panel=TRAINING
        ),
    ] = None,
    max_len: Annotated[
        int | None, typer.Option(help="Tokens per packed row.", rich_help_panel=TRAINING)
    ] = None,
    pack: Annotated[
        bool | None,
        typer.Option("--pack/--no-pack", help="Pack sequences.", rich_help_panel=TRAINING),
    ] = None,
    batch_size: Annotated[
        int | None, typer.Option(help="Rows per micro-batch.", rich_help_panel=TRAINING)
    ] = None,
    grad_accum: Annotated[
        int | None, typer.Option(help="Micro-batches per step.", rich_help_panel=TRAINING)
    ] = None,
    max_steps: Annotated[
        int | None, typer.Option(help="Stop after N steps.", rich_help_panel=TRAINING)
    ] = None,
    max_minutes: Annotated[
        float | None,
        typer.Option(help="Stop after this many minutes of training.", rich_help_panel=TRAINING),
    ] = None,
    seed: Seed = None,
    device: OptionalDevice = None,
    precision: Annotated[
        Precision | None, typer.Option(help="Float precision.", rich_help_panel=HARDWARE)
    ] = None,
    save_every: Annotated[
        int | None, typer.Option(help="Checkpoint every N steps.", rich_help_panel=CHECKPOINTS)
    ] = None,
    resume: Resume = None,
    set_: SetOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    quiet: Quiet = False,
) -> None:
    """Supervised fine-tuning, loss on assistant tokens only.

    DATA is trajectory shards; the model (a registered name, a folder or a hub id) is
    trained with the loss on the assistant's tokens and written to OUT, with checkpoints to
    resume from.
    """
    _require_train_extra()
    from ..train.data import left_out_note
    from ..train.sft import SFTConfig, train_sft, unseen_note

    values = dict(
        model=model,
        epochs=epochs,
        lr=lr,
        lora_r=lora_r,
        max_len=max_len,
        pack=pack,
        batch_size=batch_size,
        grad_accum=grad_accum,
        max_steps=max_steps,
        max_minutes=max_minutes,
        device=device,
        precision=precision,
        seed=seed,
        save_every=save_every,
        resume=resume,
    )
    cfg = _config(SFTConfig, _settings(values, set_))
    cfg = cfg.model_copy(update={"model": _model_folder(cfg.model)})
    rows = _records(data, "data")
    progress = RichProgress(("loss", "lr", "tokens_per_s", "epoch"), quiet=quiet or as_json)
    result = train_sft(rows, out, cfg, progress=progress)
    if as_json:
        print(json.dumps(result.model_dump()))
    elif not quiet:
        console.print(
            f"[green]✓[/] {result.steps} steps, {result.tokens:,} tokens in "
            f"{result.seconds:.1f}s ({result.tokens_per_s:,.0f} tokens/s), loss "
            f"{result.first_loss:.3f} → {result.final_loss:.3f}; model in {out}"
        )
        run = {
            **result.model_dump(),
            "examples": result.data.get("examples", 0),
            "max_minutes": cfg.max_minutes,
        }
        for note in (left_out_note(result.data, cfg.max_len), unseen_note(run)):
            if note:
                console.print(f"[yellow]![/] {note}")


@app.command("train-grpo", rich_help_panel="Training")
def train_grpo_command(
    model: Annotated[
        str,
        typer.Option(
            metavar="MODEL", help="Starting checkpoint: a model folder or name (smollm2-135m)."
        ),
        # typer marks a required option by the default ``...``
    ] = ...,  # type: ignore[assignment]
    # typer marks a required option by the default ``...``
    out: Annotated[Path, typer.Option("--out", "-o", help="Model folder to write.")] = ...,  # type: ignore[assignment]
    tasks: Annotated[
        Path | None, typer.Option(help="Task rows (ground truth, tools, first request).")
    ] = None,
    arenas: Annotated[Path | None, typer.Option(help="Arena packages (ASTRA-style).")] = None,
    iterations: Annotated[
        int | None, typer.Option(help="Policy updates.", rich_help_panel=TRAINING)
    ] = None,
    group_size: Annotated[
        int | None, typer.Option(help="G: episodes per task.", rich_help_panel=TRAINING)
    ] = None,
    tasks_per_step: Annotated[
        int | None, typer.Option(help="Tasks per update.", rich_help_panel=TRAINING)
    ] = None,
    lr: Annotated[float | None, typer.Option(help="Learning rate.", rich_help_panel=TRAINING)] = (
        None
    ),
    advantage: Annotated[
        Literal["grpo", "gigpo", "turn_ppo", "archer", "prm", "implicit_prm"] | None,
        typer.Option(
            help="Credit assignment (docs/methods.md: which when).", rich_help_panel=CREDIT
        ),
    ] = None,
    filter_variance: Annotated[
        float | None,
        typer.Option(
            help="StarPO-S: keep the top share of tasks by reward std (RAGEN: 0.25).",
            rich_help_panel=CREDIT,
        ),
    ] = None,
    prm: Annotated[
        Path | None,
        typer.Option(help="With --advantage prm: a folder from train-prm.", rich_help_panel=CREDIT),
    ] = None,
    beta: Annotated[
        float | None, typer.Option(help="KL weight (0: no KL).", rich_help_panel=TRAINING)
    ] = None,
    reward: Annotated[
        str | None,
        typer.Option(
            metavar="TERM[=W,...]",
            help="A reward term (exact_match, call_match, state_match, tool_match, "
            "call_accuracy, agent_reward, judge) or weighted terms TERM=W,TERM=W summing to 1.",
            rich_help_panel=CREDIT,
        ),
    ] = None,
    temperature: Annotated[
        float | None, typer.Option(help="Sampling temperature.", rich_help_panel=TRAINING)
    ] = None,
    seed: Seed = None,
    device: OptionalDevice = None,
    save_every: Annotated[
        int | None,
        typer.Option(help="Checkpoint every N updates.", rich_help_panel=CHECKPOINTS),
    ] = None,
    resume: Resume = None,
    set_: SetOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the history as JSON.")] = False,
    quiet: Quiet = False,
) -> None:
    """RL on multi-turn episodes with a chosen credit estimator.

    Give the tasks as task rows (--tasks) or as arena packages (--arenas); the model plays
    G episodes per task and is updated on each turn's advantage: group-relative (GRPO,
    GiGPO), from a turn-level critic (Turn-PPO, ArCHer) or from process rewards (an explicit
    PRM from train-prm, or iStar's implicit one).
    """
    _require_train_extra()
    if prm is not None and not prm.exists():
        raise InputNotFoundError(f"--prm {prm} does not exist")
    if (tasks is None) == (arenas is None):
        raise ConfigError("give exactly one of --tasks DIR or --arenas DIR")
    from ..train.grpo import GRPOConfig, train_grpo

    values: dict[str, Any] = dict(
        model=model,
        iterations=iterations,
        group_size=group_size,
        tasks_per_step=tasks_per_step,
        lr=lr,
        advantage=advantage,
        filter_variance=filter_variance,
        beta=beta,
        device=device,
        seed=seed,
        save_every=save_every,
        resume=resume,
    )
    settings = _settings(values, set_)
    if reward is not None:
        settings.setdefault("reward", {}).update(_reward_terms(reward))
    if prm is not None:
        settings.setdefault("prm", {})["path"] = str(prm)
    if temperature is not None:
        settings.setdefault("rollout", {})["temperature"] = temperature
    cfg = _config(GRPOConfig, settings)
    cfg = cfg.model_copy(update={"model": _model_folder(cfg.model)})
    make_env = reward_fn = arena_set = None
    if arenas is not None:
        from ..envs.arena import arena_training_set

        arena_set = arena_training_set(arenas)
        rows, make_env, reward_fn = arena_set.rows, arena_set.make_env, arena_set.reward
        if not rows:
            raise ConfigError(f"{arenas} holds no arena packages", hint="trajsynth arena pack")
    else:
        assert tasks is not None
        rows = _records(tasks, "tasks")
    progress = RichProgress(
        (
            "reward",
            "success",
            "calls_per_episode",
            "format_errors",
            "adv_std",
            "groups_filtered",
            "critic_loss",
            "explained_variance",
            "prm_score_mean",
            "prm_loss",
        ),
        quiet=quiet or as_json,
    )
    try:
        result = train_grpo(
            rows, out, cfg, make_env=make_env, reward_fn=reward_fn, progress=progress
        )
    finally:
        if arena_set is not None:
            arena_set.close()
    if as_json:
        print(json.dumps(result.model_dump()))
    elif not quiet:
        h = result.history
        console.print(
            f"[green]✓[/] {len(h)} updates in {result.seconds:.1f}s; reward "
            f"{h[0]['reward']:.3f} → {h[-1]['reward']:.3f}; model in {out}"
        )


def _reward_terms(text: str) -> dict[str, Any]:
    """``--reward``: one term name, or ``TERM=W,TERM=W`` (checked by the reward config)."""
    if "=" not in text:
        return {"kind": text.strip()}
    terms: dict[str, float] = {}
    for part in text.split(","):
        name, sep, weight = part.partition("=")
        try:
            terms[name.strip()] = float(weight)
        except ValueError:
            raise ConfigError(f"--reward {text!r}: {part!r} is not TERM=WEIGHT") from None
        if not sep or not name.strip():
            raise ConfigError(f"--reward {text!r}: {part!r} is not TERM=WEIGHT")
    return {"terms": terms}


@app.command("train-prm", rich_help_panel="Training")
def train_prm_command(
    data: Annotated[
        Path,
        typer.Argument(
            help="Rows with step labels: STeCa rows, or trajectories with ground truth."
        ),
    ],
    # typer marks a required option by the default ``...``
    out: Annotated[Path, typer.Option("--out", "-o", help="PRM folder to write.")] = ...,  # type: ignore[assignment]
    model: Annotated[
        str,
        typer.Option(
            metavar="MODEL",
            help="The encoder: a model folder or name (the policy's SFT checkpoint).",
            rich_help_panel=MODEL,
        ),
        # typer marks a required option by the default ``...``
    ] = ...,  # type: ignore[assignment]
    labels: Annotated[
        Literal["steca", "verifier", "both"] | None,
        typer.Option(
            help="Step labels: STeCa's Monte Carlo values, the verifier's step outcomes, or both.",
            rich_help_panel=TRAINING,
        ),
    ] = None,
    holdout: Annotated[
        float | None, typer.Option(help="Share of tasks held out.", rich_help_panel=TRAINING)
    ] = None,
    epochs: Annotated[
        int | None,
        typer.Option(help="Passes of the head over the steps.", rich_help_panel=TRAINING),
    ] = None,
    seed: Seed = None,
    device: OptionalDevice = None,
    set_: SetOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Train a step scorer (explicit PRM) and report its held-out AUC.

    The encoder reads each assistant step of the rows; a head learns the step labels (soft
    BCE) on most tasks and is scored on the held-out ones. Use the folder it writes with
    `train-grpo --advantage prm --prm DIR`.
    """
    _require_train_extra()
    from ..train.agent_prm import PRMConfig, train_prm

    values = dict(
        model=model, labels=labels, holdout=holdout, epochs=epochs, device=device, seed=seed
    )
    cfg = _config(PRMConfig, _settings(values, set_))
    rows = _records(data, "data")
    folder = _model_folder(cfg.model)
    if folder == "tiny":
        raise ConfigError("--model tiny is built by train-sft; give its output folder")
    cfg = cfg.model_copy(update={"model": folder})
    result = train_prm(rows, out, cfg)
    if as_json:
        print(json.dumps(result.model_dump()))
        return
    auc = "n/a (one class)" if result.holdout_auc is None else f"{result.holdout_auc:.3f}"
    console.print(
        f"[green]✓[/] {result.train_steps} training steps ({result.train_tasks} tasks), "
        f"{result.holdout_steps} held out ({result.holdout_tasks} tasks): held-out step AUC "
        f"{auc}; PRM in {out}"
    )


@app.command("eval", rich_help_panel="Training")
def eval_command(
    tasks: Annotated[
        Path | None, typer.Option(help="Held-out task rows (or use --benchmark).")
    ] = None,
    benchmark: Annotated[
        str | None,
        typer.Option(
            help="A public benchmark instead of --tasks: bfcl.",
            metavar="NAME",
            rich_help_panel=BENCHMARK,
        ),
    ] = None,
    categories: Annotated[
        str | None,
        typer.Option(
            help="With --benchmark bfcl: comma-separated categories (default: simple_python, "
            "multiple, parallel, parallel_multiple, live_simple, live_multiple, irrelevance, "
            "live_irrelevance).",
            metavar="LIST",
            rich_help_panel=BENCHMARK,
        ),
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            help="With --benchmark: the benchmark's data (default: the bfcl-eval wheel's).",
            rich_help_panel=BENCHMARK,
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            help="With --benchmark: write the report as JSON here.", rich_help_panel=BENCHMARK
        ),
    ] = None,
    baseline: Annotated[
        Path | None,
        typer.Option(
            help="With --benchmark: an earlier run's answers (its --episodes file); each "
            "category's difference on the questions both answered, with a paired 95% interval.",
            rich_help_panel=BENCHMARK,
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            metavar="MODEL", help="A model folder or name (smollm2-135m).", rich_help_panel=MODEL
        ),
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option(
            metavar="URL",
            help="An OpenAI-compatible endpoint instead of --model.",
            rich_help_panel=MODEL,
        ),
    ] = None,
    api_model: Annotated[
        str, typer.Option(metavar="NAME", help="Model name at --base-url.", rich_help_panel=MODEL)
    ] = "",
    api_key_env: Annotated[
        str | None,
        typer.Option(
            metavar="VAR",
            help="Environment variable with the endpoint's API key.",
            rich_help_panel=MODEL,
        ),
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            help="Evaluate the first N tasks (--benchmark: N per category, spread).",
            min=1,
            rich_help_panel=EPISODES,
        ),
    ] = None,
    temperature: Annotated[
        float, typer.Option(help="Sampling temperature (0: greedy).", rich_help_panel=EPISODES)
    ] = 0.0,
    max_steps: Annotated[
        int, typer.Option(help="Assistant turns per episode.", rich_help_panel=EPISODES)
    ] = 8,
    max_new_tokens: Annotated[
        int | None,
        typer.Option(help="Tokens per turn (default 256).", rich_help_panel=EPISODES),
    ] = None,
    max_observation_chars: Annotated[
        int | None, typer.Option(help="Longest tool output shown.", rich_help_panel=EPISODES)
    ] = 16_000,
    device: Device = "auto",
    episodes: Annotated[
        Path | None,
        typer.Option(help="Write every episode (or benchmark answer) as JSON here."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Score a model on held-out tasks or a public benchmark.

    Held-out task rows (--tasks) are played as episodes and scored with the shared verifiers
    (call, exact, state and outputs match), per capability and overall; --benchmark bfcl
    scores BFCL's single-turn categories with its AST checker.
    """
    if (model is None) == (base_url is None):
        raise ConfigError(
            "give exactly one of --model DIR or --base-url URL (DIR: a folder or name)"
        )
    if benchmark is not None:
        if tasks is not None:
            raise ConfigError("give either --tasks or --benchmark, not both")
        _eval_benchmark(
            benchmark,
            categories=categories,
            data_dir=data_dir,
            out=out,
            limit=limit,
            temperature=temperature,
            max_new_tokens=max_new_tokens,
            player=_eval_client(model, base_url, api_model, api_key_env, device, 64),
            name=str(model) if model is not None else f"{base_url} {api_model}".strip(),
            answers=episodes,
            as_json=as_json,
            baseline=baseline,
        )
        return
    if tasks is None:
        raise ConfigError("give --tasks ROWS (held-out task rows) or --benchmark bfcl")
    for flag, value in (
        ("--categories", categories),
        ("--data-dir", data_dir),
        ("--out", out),
        ("--baseline", baseline),
    ):
        if value is not None:
            raise ConfigError(f"{flag} goes with --benchmark")
    from ..train.rollout import ChatPlayer, RolloutConfig

    rows = _records(tasks, "tasks")[:limit]
    if not rows:
        raise InputNotFoundError(f"no task rows in {tasks}")
    cfg = RolloutConfig(
        temperature=temperature, max_steps=max_steps, max_new_tokens=max_new_tokens or 256
    )
    client = _eval_client(model, base_url, api_model, api_key_env, device, cfg.batch_size)
    if model is not None:
        player = ChatPlayer(client, logprobs=True)
        name = str(model)
    else:
        player = ChatPlayer(client)
        name = f"{base_url} {api_model}".strip()
    from ..train.eval import evaluate
    from ..train.synth import env_maker

    report = evaluate(rows, player, env_maker(max_observation_chars), cfg)
    if episodes is not None:
        episodes.write_text(json.dumps(report.episodes, indent=1, default=str))
    if as_json:
        print(json.dumps(report.model_dump(exclude={"episodes"})))
        return
    _print_report(name, report)


def _eval_client(
    model: str | None,
    base_url: str | None,
    api_model: str,
    api_key_env: str | None,
    device: str,
    batch_size: int,
) -> Any:
    """The llm client that plays ``--model`` (a local checkpoint, batched) or ``--base-url``."""
    if model is not None:
        _require_train_extra()
        folder = _model_folder(model)
        if folder == "tiny":
            raise ConfigError("--model tiny is built by train-sft; evaluate its output folder")
        from ..llm.base import RoleConfig
        from ..llm.client import LLMClient
        from ..llm.local import LocalBackend
        from ..train.modeling import eval_autocast, resolve_device, trained_precision

        where = resolve_device(device)
        autocast = eval_autocast(where, trained_precision(folder))
        local = {"device": where, "batch_size": batch_size, "autocast": autocast}
        backend = LocalBackend(RoleConfig(backend="local", model=str(folder), local=local))
        return LLMClient("student", backend.config, backend, None)
    from ..llm.client import client_for_role

    role: dict[str, Any] = {"backend": "openai", "base_url": base_url, "model": api_model}
    role["cache"] = False
    if api_key_env:
        role["api_key_env"] = api_key_env
    return client_for_role("eval", {"eval": role})


def _eval_benchmark(
    benchmark: str,
    *,
    categories: str | None,
    data_dir: Path | None,
    out: Path | None,
    limit: int | None,
    temperature: float,
    max_new_tokens: int | None,
    player: Any,
    name: str,
    answers: Path | None,
    as_json: bool,
    baseline: Path | None = None,
) -> None:
    """``eval --benchmark bfcl``: BFCL's single-turn categories (:mod:`trajsynth.train.bfcl`)."""
    if benchmark.lower() != "bfcl":
        raise ConfigError(f"unknown benchmark {benchmark!r}", hint="available: bfcl")
    from ..train.bfcl import (
        DEFAULT_CATEGORIES,
        BfclConfig,
        compare_answers,
        evaluate_bfcl,
        read_answers,
    )

    before = read_answers(baseline) if baseline is not None else None  # before the long part

    cats = categories.split(",") if categories else list(DEFAULT_CATEGORIES)
    cfg = BfclConfig(
        categories=cats,
        limit=limit,
        data_dir=str(data_dir) if data_dir is not None else None,
        temperature=temperature,
        max_new_tokens=max_new_tokens or 256,
    )
    with Progress(
        TextColumn("[bold]bfcl[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=live_console() if err_console.is_terminal else err_console,
        disable=as_json or not err_console.is_terminal,
    ) as bar:

        def progress(total: int) -> Callable[[int], None]:
            task = bar.add_task("", total=total)
            return lambda n: bar.advance(task, n)

        report = evaluate_bfcl(player, cfg, model=name, progress=progress)
    if before is not None:
        report.baseline = str(baseline)
        report.versus = compare_answers(report.answers, before)
    if answers is not None:
        answers.write_text(json.dumps(report.answers, indent=1, default=str))
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report.model_dump(), indent=1))
    if as_json:
        print(json.dumps(report.model_dump()))
        return
    print_bfcl_report(report)


def print_bfcl_report(report: Any) -> None:
    """A BFCL report as a table: accuracy per category with its count and main errors."""
    from rich.table import Table

    per = f", {report.limit} per category" if report.limit else ""
    t = Table(title=f"BFCL: {report.model} ({report.seconds:.0f}s{per})", title_justify="left")
    t.add_column("category")
    t.add_column("accuracy", justify="right")
    t.add_column("95% interval", justify="right")
    t.add_column("correct", justify="right")
    t.add_column("main errors")
    for cat, score in report.categories.items():
        errs = ", ".join(f"{k} {v}" for k, v in list(score.errors.items())[:3])
        t.add_row(
            cat,
            f"{score.accuracy:.1%}",
            _interval(score.interval),
            f"{score.correct}/{score.total}",
            errs,
        )
    if report.mean is not None:
        t.add_row(
            "[bold]mean[/] (5 AST categories)",
            f"[bold]{report.mean:.1%}[/]",
            _interval(report.mean_interval),
            "",
            "",
        )
    console.print(t)
    if report.versus:
        v = Table(title=f"against {report.baseline}", title_justify="left")
        for col in ("category", "questions", "baseline", "this run", "difference", "95% interval"):
            v.add_column(col, justify="left" if col == "category" else "right")
        for cat, d in report.versus.items():
            v.add_row(
                "[bold]mean[/] (5 AST categories)" if cat == "mean" else cat,
                str(d.questions),
                f"{d.baseline:.1%}",
                f"{d.accuracy:.1%}",
                f"{d.difference:+.1%}",
                _interval(d.interval, signed=True),
            )
        console.print(v)
    sys.stdout.flush()


def _interval(bounds: Any, signed: bool = False) -> str:
    low, high = bounds
    if low is None or high is None:
        return ""
    return f"{low:+.0%} to {high:+.0%}" if signed else f"{low:.0%}-{high:.0%}"


def _print_report(name: str, report: Any) -> None:
    from rich.table import Table

    cols = ("call_match", "exact_match", "state_match", "outputs_match", "call_accuracy")
    t = Table(title=f"{name}: {report.tasks} tasks in {report.seconds:.1f}s", title_justify="left")
    t.add_column("capability")
    t.add_column("tasks", justify="right")
    for c in cols:
        t.add_column(c.replace("_", " "), justify="right")
    for cap, scores in report.by_capability.items():
        t.add_row(cap, str(report.counts[cap]), *(f"{scores.get(c, 0):.1%}" for c in cols))
    t.add_row(
        "[bold]overall[/]",
        str(report.tasks),
        *(f"[bold]{report.overall.get(c, 0):.1%}[/]" for c in cols),
    )
    console.print(t)
    sys.stdout.flush()
