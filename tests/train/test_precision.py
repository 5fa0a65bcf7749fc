"""``precision: auto``: bf16 autocast on CUDA and on a CPU with AMX (fp32 there for the tiny
model trained from scratch), fp32 elsewhere; bf16 on a CPU trains (weights stay fp32) and a
checkpoint is evaluated the way it trains.

Run: python -m pytest tests/train/test_precision.py -q
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from trajsynth.train import modeling  # noqa: E402
from trajsynth.train.sft import SFTConfig, train_sft  # noqa: E402

from .conftest import conversation  # noqa: E402


@pytest.mark.parametrize("amx", [True, False])
def test_auto_follows_the_hardware(monkeypatch: pytest.MonkeyPatch, amx: bool) -> None:
    monkeypatch.setattr(modeling, "cpu_has_bf16_matmul", lambda: amx)
    assert modeling.resolve_dtype("auto", "cpu") == ("bf16" if amx else "fp32")
    assert modeling.eval_autocast("cpu") == ("bf16" if amx else "none")
    assert modeling.resolve_dtype("auto", "cuda:1") == "bf16"
    assert modeling.resolve_dtype("auto", "mps") == "fp32"
    # the tiny student trained from scratch learns worse in bf16 and is no faster on a CPU
    assert modeling.resolve_dtype("auto", "cpu", from_scratch=True) == "fp32"
    assert modeling.resolve_dtype("auto", "cuda", from_scratch=True) == "bf16"
    # an explicit choice is kept whatever the hardware
    assert modeling.resolve_dtype("fp32", "cuda") == "fp32"
    assert modeling.resolve_dtype("bf16", "cpu") == "bf16"


def test_the_probe_answers_without_failing() -> None:
    assert isinstance(modeling.cpu_has_bf16_matmul(), bool)


def test_bf16_on_the_cpu_trains_fp32_weights_to_nearly_the_fp32_loss(tmp_path: Path) -> None:
    """Asked for on a CPU (where it once stopped the run), bf16 autocast trains: the saved
    weights are fp32 and the loss after a few steps is close to an fp32 run's."""
    rows = [conversation(i, city) for i, city in enumerate(["Paris", "Oslo", "Lima", "Rome"])]
    losses = {}
    for precision in ("fp32", "bf16"):
        cfg = SFTConfig(
            max_steps=4, batch_size=2, max_len=512, seed=1, device="cpu", precision=precision
        )
        cfg.tiny.vocab_size, cfg.tiny.hidden_size, cfg.tiny.intermediate_size = 400, 32, 64
        result = train_sft(rows, tmp_path / precision, cfg)
        assert result.precision == precision and result.steps == 4
        assert modeling.trained_precision(tmp_path / precision) == precision  # its record
        assert result.final_loss is not None and result.final_loss < result.first_loss
        losses[precision] = result.final_loss
    from safetensors.torch import load_file

    weights = load_file(str(tmp_path / "bf16" / "model.safetensors"))
    assert {t.dtype for t in weights.values()} == {torch.float32}
    assert losses["bf16"] == pytest.approx(losses["fp32"], rel=0.05)


@pytest.mark.parametrize("amx", [True, False])
def test_eval_follows_the_precision_the_checkpoint_trained_in(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, amx: bool
) -> None:
    """A checkpoint that trained in fp32 (the tiny student on a CPU) is scored in fp32 even on
    an AMX CPU, where bf16 rounding would cost it accuracy; one that trained in bf16, or a
    model with no trajsynth record, is scored the way the hardware trains."""
    import json

    monkeypatch.setattr(modeling, "cpu_has_bf16_matmul", lambda: amx)
    auto = "bf16" if amx else "none"
    for name, record, want in [
        ("sft32", ("trajsynth_sft.json", "fp32"), "none"),
        ("sft16", ("trajsynth_sft.json", "bf16"), auto),
        ("grpo32", ("trajsynth_grpo.json", "fp32"), "none"),
        ("plain", None, auto),
        ("garbled", ("trajsynth_sft.json", None), auto),
    ]:
        folder = tmp_path / name
        folder.mkdir()
        if record is not None:
            file, precision = record
            text = json.dumps({"result": {"precision": precision}}) if precision else "{oops"
            (folder / file).write_text(text)
        trained = modeling.trained_precision(folder)
        assert trained == (record[1] if record else None), name
        assert modeling.eval_autocast("cpu", trained) == want, name
