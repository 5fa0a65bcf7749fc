"""SFT: a smoke run through the real CLI, the gradient-accumulation invariant, resume, and
the import rules of the training commands.

Run: python -m pytest tests/train/test_sft.py -q
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from trajsynth.core.errors import ConfigError  # noqa: E402
from trajsynth.store.shards import ShardWriter  # noqa: E402
from trajsynth.train.progress import RecordingProgress  # noqa: E402
from trajsynth.train.sft import SFTConfig, train_sft  # noqa: E402

from .conftest import conversation  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TINY = {"vocab_size": 400, "hidden_size": 32, "intermediate_size": 64, "num_layers": 2}
CITIES = ["Paris", "Oslo", "Lima", "Rome", "Kyiv", "Cork", "Bern", "Riga"]


def _rows(n: int = 16) -> list:
    return [conversation(i, CITIES[i % len(CITIES)]) for i in range(n)]


def _write(rows: list, folder: Path) -> Path:
    with ShardWriter(folder) as w:
        w.write(rows)
    return folder


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """The real entry point, in this process: (exit code, stdout, stderr)."""
    from trajsynth.cli import main

    capsys.readouterr()
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_train_sft_cli_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """2 steps through the real command: finite loss, every trainable parameter changed, a
    loadable model folder."""
    from transformers import AutoModelForCausalLM

    data = _write(_rows(), tmp_path / "data")
    out = tmp_path / "ckpt"
    sets = [f"tiny.{k}={v}" for k, v in TINY.items()]
    code, stdout, stderr = _cli(
        capsys, "train-sft", str(data), "--out", str(out), "--max-steps", "2",
        "--batch-size", "4", "--max-len", "512", "--lr", "1e-2", "--json",
        *[a for s in sets for a in ("--set", s)],
    )  # fmt: skip
    assert code == 0, stderr
    result = json.loads(stdout.strip().splitlines()[-1])
    assert result["steps"] == 2 and result["data"]["examples"] == 16
    assert all(map(lambda x: x == x and abs(x) < 1e4, (result["first_loss"], result["final_loss"])))
    trained = AutoModelForCausalLM.from_pretrained(out)
    # the same seed builds the same initial weights: compare against them
    from trajsynth.train.tiny import TinyConfig, new_student

    initial, _ = new_student(_rows(), TinyConfig(**TINY))
    before = dict(initial.named_parameters())
    for name, p in trained.named_parameters():
        assert not torch.equal(p, before[name]), f"parameter {name} has not changed"
    assert (out / "trajsynth_sft.json").is_file() and not (out / "checkpoint").exists()


def _params(out: Path) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(out)
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def test_micro_batch_1_by_accum_8_equals_8_by_1() -> None:
    """The loss is divided by the whole step's token count, so one micro-batch of 8 and
    eight micro-batches of 1 give the same gradient (the loop's own function is used)."""
    from trajsynth.train.data import batches, tokenize_rows
    from trajsynth.train.sft import accumulate_gradients
    from trajsynth.train.tiny import TinyConfig, new_student

    rows = _rows(8)
    model, tok = new_student(rows, TinyConfig(**TINY))
    examples, _ = tokenize_rows(tok, rows, max_len=512)
    common = dict(max_len=512, pack_sequences=False, pad_id=tok.pad_token_id, seed=0)
    one_by_eight = batches(examples, batch_size=8, **common)
    eight_by_one = batches(examples, batch_size=1, **common)
    assert len(one_by_eight) == 1 and len(eight_by_one) == 8
    grads = []
    for micro in (one_by_eight, eight_by_one):
        model.zero_grad()
        loss, n = accumulate_gradients(model, micro, "cpu", "fp32")
        grads.append((loss, n, {k: p.grad.clone() for k, p in model.named_parameters()}))
    (la, na, ga), (lb, nb, gb) = grads
    assert na == nb and la == pytest.approx(lb, rel=1e-5)
    for name in ga:
        assert torch.allclose(ga[name], gb[name], rtol=1e-4, atol=1e-8), name


class _Crash(RecordingProgress):
    def update(self, step: int, metrics: dict[str, float]) -> None:
        super().update(step, metrics)
        if step == 3:
            raise KeyboardInterrupt


def test_step_budget_caps_epochs_but_never_adds_steps(tmp_path: Path) -> None:
    """16 conversations, 2 per batch: 8 steps an epoch. A budget of 5 stops 2 epochs at 5;
    a budget of 50 leaves 1 epoch at its 8."""
    rows = _rows()
    cfg = SFTConfig(tiny=TINY, epochs=2, batch_size=2, max_len=512, pack=False, step_budget=5)
    assert train_sft(rows, tmp_path / "capped", cfg).steps == 5
    cfg = cfg.model_copy(update={"epochs": 1, "step_budget": 50})
    assert train_sft(rows, tmp_path / "uncapped", cfg).steps == 8


def test_pack_len_keeps_long_rows_whole_without_longer_steps(tmp_path: Path) -> None:
    """max_len is the longest conversation kept whole; pack_len the packed row. A conversation
    longer than pack_len gets a row of its own, so nothing is cut, while the short ones are
    packed as densely as before: as many steps as packing at pack_len, more than at max_len."""
    from trajsynth.train.data import pack, tokenize_rows
    from trajsynth.train.tiny import new_student

    long_name = " ".join(f"{c}{k}" for k in range(30) for c in CITIES[:2])
    rows = [*_rows(12), *(conversation(20 + i, long_name) for i in range(4))]
    base = SFTConfig(tiny=TINY, epochs=1, batch_size=1, max_len=1024)
    _, tok = new_student(rows, base.tiny.model_copy(update={"seed": base.seed}))
    examples, stats = tokenize_rows(tok, rows, max_len=1024, reasoning=base.reasoning)
    short = min(len(e) for e in examples)
    assert stats.truncated == 0
    narrow = 2 * short + 10  # two short conversations a row; the long ones are longer
    assert any(len(e) > narrow for e in examples)
    packed = train_sft(rows, tmp_path / "p", base.model_copy(update={"pack_len": narrow}))
    assert packed.steps == len(pack(examples, narrow)) > len(pack(examples, 1024))
    assert packed.data["truncated"] == 0 and packed.data["cut_off"] == 0
    assert packed.tokens == stats.tokens  # every token of every row, none cut
    # at max_len=narrow instead, the same rows lose their ends
    cut = train_sft(rows, tmp_path / "c", base.model_copy(update={"max_len": narrow}))
    assert cut.data["truncated"] > 0 and cut.tokens < stats.tokens
    # unset, pack_len leaves the run (and a resumable checkpoint's identity) as it was
    assert base.identity() == base.model_copy(update={"pack_len": None}).identity()
    assert base.identity() != base.model_copy(update={"pack_len": narrow}).identity()


def test_a_run_stopped_before_one_epoch_counts_the_examples_it_never_saw(tmp_path: Path) -> None:
    """Stopped after k of an epoch's micro-batches, the examples outside those k are counted
    as never trained on (exactly: the epoch's first k batches hold the rest), and the note
    names the cause; a whole epoch leaves none."""
    from trajsynth.train.data import batches, tokenize_rows
    from trajsynth.train.sft import unseen_note
    from trajsynth.train.tiny import new_student

    rows = _rows(12)
    cfg = SFTConfig(tiny=TINY, epochs=1, batch_size=2, max_len=512, pack=False)
    _, tok = new_student(rows, cfg.tiny.model_copy(update={"seed": cfg.seed}))
    examples, _ = tokenize_rows(tok, rows, max_len=512, reasoning=cfg.reasoning)
    epoch = batches(examples, batch_size=2, max_len=512, pack_sequences=False, pad_id=0, seed=0)
    assert len(epoch) == 6 and all(b.sequences == 2 for b in epoch)
    whole = train_sft(rows, tmp_path / "whole", cfg)
    assert (whole.steps, whole.planned_steps, whole.examples_unseen) == (6, 6, 0)
    assert whole.epochs_done == 1.0 and unseen_note(whole.model_dump()) is None
    part = train_sft(rows, tmp_path / "part", cfg.model_copy(update={"max_steps": 2}))
    assert (part.steps, part.data["examples"], part.examples_unseen) == (2, 12, 8)
    assert part.epochs_done == pytest.approx(2 / 6)
    assert unseen_note({**part.model_dump(), "examples": 12}) == (
        "training ended after 2 steps (max_steps or step_budget), 0.33 of an epoch: 8 of 12 "
        "examples were never trained on; give it more time or fewer, shorter rows"
    )
    saved = json.loads((tmp_path / "part" / "trajsynth_sft.json").read_text())["result"]
    assert saved["examples_unseen"] == 8


def test_train_sft_cli_says_what_a_short_run_never_saw(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One unpacked step of 4 of the 16 rows: the command's summary is followed by the note
    (read with whitespace folded: the console wraps at its width)."""
    data = _write(_rows(), tmp_path / "data")
    sets = [a for k, v in TINY.items() for a in ("--set", f"tiny.{k}={v}")]
    code, stdout, stderr = _cli(
        capsys, "train-sft", str(data), "--out", str(tmp_path / "o"), "--max-steps", "1",
        "--batch-size", "4", "--max-len", "512", "--set", "pack=false", *sets,
    )  # fmt: skip
    assert code == 0, stderr
    assert (
        "training ended after 1 step (max_steps or step_budget), 0.25 of an epoch: 12 of 16 "
        "examples were never trained on" in " ".join(stdout.split())
    )


def test_time_budget_stops_training_with_the_lr_decayed(tmp_path: Path) -> None:
    from trajsynth.train.sft import _lr_at

    cfg = SFTConfig(tiny=TINY, max_steps=100_000, max_minutes=0.01, batch_size=2, max_len=512)
    result = train_sft(_rows(), tmp_path / "o", cfg)
    assert 1 <= result.steps < 100_000 and result.seconds < 0.6 + 30
    # the schedule follows time when time is further along than steps
    floor = cfg.min_lr_ratio * 3e-3
    assert _lr_at(10, 100_000, cfg, time_share=1.0) == pytest.approx(floor)
    assert _lr_at(10, 100_000, cfg, time_share=0.5) == pytest.approx((floor + 3e-3) / 2)
    assert _lr_at(10, 100_000, cfg, time_share=0.0) < 0.01 * 3e-3  # still warming up


def test_resume_continues_where_it_stopped(tmp_path: Path) -> None:
    rows = _rows()
    cfg = SFTConfig(tiny=TINY, max_steps=5, batch_size=2, max_len=512, save_every=2)
    straight = train_sft(rows, tmp_path / "straight", cfg)
    with pytest.raises(KeyboardInterrupt):
        train_sft(rows, tmp_path / "resumed", cfg, progress=_Crash())
    assert (tmp_path / "resumed" / "checkpoint" / "state.json").is_file()
    progress = RecordingProgress()
    resumed = train_sft(rows, tmp_path / "resumed", cfg, progress=progress)
    assert resumed.resumed_from == 2 and progress.notes == ["resuming from step 2 of 5"]
    assert [r["step"] for r in progress.records] == [3, 4, 5]
    assert resumed.final_loss == pytest.approx(straight.final_loss, rel=1e-4)
    pa, pb = _params(tmp_path / "straight"), _params(tmp_path / "resumed")
    for name in pa:
        assert torch.allclose(pa[name], pb[name], atol=1e-5), name
    # a checkpoint from other settings is refused, not silently mixed
    with pytest.raises(KeyboardInterrupt):
        train_sft(rows, tmp_path / "other", cfg, progress=_Crash())
    with pytest.raises(ConfigError, match="other settings"):
        train_sft(rows, tmp_path / "other", cfg.model_copy(update={"lr": 0.1}))


def test_help_does_not_import_torch() -> None:
    code = (
        "import sys; from trajsynth.cli import main\n"
        "try: main(['--help'])\nexcept SystemExit: pass\n"
        "print('torch' in sys.modules, 'transformers' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert out.stdout.strip().splitlines()[-1] == "False False"
    assert "train-sft" in out.stdout and "train-grpo" in out.stdout


def test_without_the_train_extra_one_install_line(tmp_path: Path) -> None:
    data = _write(_rows(2), tmp_path / "data")
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from trajsynth.cli import main\n"
        f"main(['train-sft', {str(data)!r}, '--out', {str(tmp_path / 'o')!r}])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert out.returncode == 1
    assert out.stderr.strip() == "the train extra is not installed: pip install 'trajsynth[train]'"


def test_user_errors_are_one_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "o")
    code, _, err = _cli(capsys, "train-sft", str(tmp_path / "missing"), "--out", out)
    assert code == 2 and "does not exist" in err and "Traceback" not in err
    data = str(_write(_rows(2), tmp_path / "data"))
    code, _, err = _cli(capsys, "train-sft", data, "--out", out, "--set", "tiny.colour=red")
    assert code == 2 and "tiny.colour: unknown setting" in err
    code, _, err = _cli(capsys, "train-sft", data, "--out", out, "--model", str(tmp_path))
    assert code == 2 and "not a model folder" in err
    code, _, err = _cli(capsys, "train-grpo", "--model", str(tmp_path), "--out", out)
    assert code == 2 and "exactly one of --tasks DIR or --arenas DIR" in err
    code, _, err = _cli(capsys, "eval", "--tasks", data)
    assert code == 2 and "exactly one of --model DIR or --base-url URL" in err


@pytest.mark.slow
def test_sft_on_500_trajectories_learns_format_and_tool_choice(tmp_path: Path) -> None:
    """SFT of the tiny student from scratch on 500 gold trajectories of ten varied built-in
    task families (300 steps of 2 × 1024 packed tokens: about three minutes on two CPU cores),
    then greedy episodes on 100 held-out tasks: well-formed calls and the right tools at every
    step on at least 80% of them.

    Exact argument values are not asserted: copying an unseen value out of the request is an
    induction circuit a 1M-parameter model trained from scratch forms only after ~10k
    examples (measured on a one-slot copy task: a sudden jump from 0% to 100% after ~350
    steps of 32), far beyond a CPU minute budget; the exact-match figure is printed."""
    from trajsynth.llm.local import LocalBackend
    from trajsynth.train.eval import evaluate
    from trajsynth.train.modeling import load_student
    from trajsynth.train.rollout import ChatPlayer, RolloutConfig
    from trajsynth.train.synth import env_maker, gold_trajectory, task_variants

    families = [
        "travel-convert", "travel-parallel-hotels", "files-read-notes", "commerce-order-status",
        "commerce-parallel-lookup", "math-marathon-miles", "math-parallel-conversions",
        "math-taxed-total", "math-clarify-interest", "commerce-clarify-address",
    ]  # fmt: skip
    make_env = env_maker(300)
    rows = task_variants(600, seed=0, task_ids=families, distractors=1)
    gold = [gold_trajectory(r, make_env) for r in rows[:500]]
    held_out = rows[500:600]
    assert not {r.id for r in held_out} & {g.id for g in gold}
    result = train_sft(
        gold, tmp_path / "m", SFTConfig(max_steps=300, batch_size=2, max_len=1024, lr=5e-3)
    )
    assert result.final_loss is not None and result.final_loss < 0.3 * result.first_loss
    model, tok = load_student(tmp_path / "m")
    player = ChatPlayer.local(LocalBackend.from_model(model, tok), logprobs=True)
    rep = evaluate(held_out, player, make_env,
                   RolloutConfig(temperature=0, max_steps=8, max_new_tokens=96))  # fmt: skip
    print({k: round(v, 3) for k, v in rep.overall.items()})
    assert rep.tasks == 100
    assert rep.overall["format_errors"] <= 0.05
    assert rep.overall["tool_match"] >= 0.8, rep.overall


def test_train_layers_trains_the_top_blocks_in_full_and_freezes_the_rest() -> None:
    """``train_layers``: the top blocks and the final norm take a step; the tied embeddings
    (the output head) and the blocks below do not, and the backward pass never reaches them
    (no gradient is even computed there)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from trajsynth.train.modeling import train_top_blocks

    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                    num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                    tie_word_embeddings=True)
    )  # fmt: skip
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainable = train_top_blocks(model, 1)
    per_block = sum(p.numel() for p in model.model.layers[3].parameters())
    assert trainable == per_block + model.model.norm.weight.numel()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    ids = torch.randint(0, 64, (2, 12))
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    moved = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert any(n.startswith("model.layers.3.") for n in moved) and "model.norm.weight" in moved
    assert all(n.startswith(("model.layers.3.", "model.norm.")) for n in moved)
    assert all(p.grad is None for n, p in model.named_parameters() if n not in moved)
    assert "model.embed_tokens.weight" not in moved


def test_train_layers_is_for_a_pretrained_model(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="train_layers"):
        train_sft(_rows(4), tmp_path / "m", SFTConfig(model="tiny", train_layers=1, max_steps=1))
