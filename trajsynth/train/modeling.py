"""Model plumbing shared by SFT, GRPO and eval: device and precision, loading a student, and
per-token log-probabilities computed only where they are needed.

- device ``auto``: CUDA, else Apple MPS, else CPU; precision ``auto``: bf16 autocast on CUDA
  and on a CPU with AMX (weights and optimizer state stay fp32), fp32 elsewhere; evaluation
  follows the precision a checkpoint trained in (:func:`eval_autocast`); AdamW fused where
  PyTorch has the kernel (:func:`fused_adamw`);
- :func:`load_student` opens a model by name or folder (:mod:`trajsynth.llm.models`) and makes
  sure its chat template has ``{% generation %}`` markers: a ChatML model whose template
  cannot show tools gets the tool-call template of :mod:`trajsynth.llm.chat_template`, known
  families borrow TRL's training template;
- :func:`with_lora` wraps a pretrained model in LoRA adapters (PyPI ``peft``; "LoRA: Low-Rank
  Adaptation of Large Language Models", arXiv:2106.09685) on its linear layers, optionally
  only the top N blocks so the backward pass stops early; only the adapters train;
- :func:`selected_logprobs` runs the decoder once and applies the LM head only at the positions
  whose next token is trained on. With a loss on assistant tokens only (typically a fifth to a
  third of a tool-use conversation), this skips most of the (T × vocabulary) logits that a
  plain ``model(input_ids, labels=...)`` computes and then throws away.
"""

from __future__ import annotations

import contextlib
import json
import warnings
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from ..core.config import StrictModel
from ..core.errors import ConfigError

__all__ = [
    "autocast",
    "eval_autocast",
    "load_student",
    "resolve_device",
    "resolve_dtype",
    "selected_logprobs",
    "trained_precision",
    "use_tool_format",
    "with_lora",
]

Precision = Literal["auto", "bf16", "fp32"]


def resolve_device(device: str = "auto") -> str:
    """``auto`` → ``cuda`` / ``mps`` / ``cpu`` (whichever is present, in that order)."""
    import torch

    if device != "auto":
        return device
    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def fused_adamw(device: str) -> bool:
    """Whether AdamW takes its fused kernel on ``device`` (CUDA and CPU). PyTorch's default
    on a CPU is a Python loop over the parameters: for SmolLM2-135M's parameter shapes about
    0.45 s a step against 0.08 s fused on 2 cores, an eighth of an SFT step (12 SFT steps:
    ~280 → ~308 tokens/s, the same loss)."""
    return device.startswith(("cuda", "cpu"))


def cpu_has_bf16_matmul() -> bool:
    """Whether this CPU multiplies bf16 matrices in hardware (Intel AMX tiles): there bf16
    autocast trains SmolLM2-135M about 1.7-2x faster than fp32 (``bench/cpu_precision.py``);
    without AMX, bf16 on a CPU is emulated and slower, so ``auto`` keeps fp32."""
    import torch

    probe = getattr(torch.cpu, "_is_amx_tile_supported", None)
    try:
        return bool(probe()) if probe is not None else False
    except RuntimeError:
        return False


def resolve_dtype(precision: Precision, device: str, *, from_scratch: bool = False) -> str:
    """``auto`` → ``bf16`` autocast on CUDA and on a CPU with AMX (:func:`cpu_has_bf16_matmul`),
    ``fp32`` elsewhere (MPS, other CPUs). Weights and optimizer state stay fp32 either way.

    On a CPU a model trained ``from_scratch`` (the tiny student) stays fp32: at its size bf16
    is no faster, and it learns worse under bf16 rounding at its high learning rate (measured
    on 500 gold trajectories, 300 steps at lr 5e-3, one thread: tool match on 100 held-out
    tasks 0.98 in fp32, 0.83 in bf16, and well-formed calls 1.00 vs 0.93)."""
    if precision != "auto":
        return precision
    if device.startswith("cuda"):
        return "bf16"
    if device == "cpu" and not from_scratch and cpu_has_bf16_matmul():
        return "bf16"
    return "fp32"


#: the files SFT and GRPO write next to a checkpoint, with the precision they trained in
_TRAINING_RECORDS = ("trajsynth_grpo.json", "trajsynth_sft.json")


def trained_precision(model: str | Path) -> str | None:
    """The precision (``fp32`` or ``bf16``) a trajsynth checkpoint folder trained in, from the
    record SFT or GRPO wrote there (the last stage's first); None for any other model."""
    folder = Path(model)
    for name in _TRAINING_RECORDS:
        try:
            record = json.loads((folder / name).read_text())
        except (OSError, ValueError):
            continue
        result = record.get("result") if isinstance(record, dict) else None
        value = result.get("precision") if isinstance(result, dict) else None
        if value in ("fp32", "bf16"):
            return str(value)
    return None


def eval_autocast(device: str, trained: str | None = None) -> str:
    """The local backend's ``autocast`` for evaluating a checkpoint on ``device``: ``bf16``
    where training would use it (:func:`resolve_dtype`), which generates 1.2-1.5x faster on
    a CPU with AMX — unless the checkpoint ``trained`` in fp32 (:func:`trained_precision`;
    the tiny from-scratch student does on a CPU, and bf16 rounding costs it accuracy): then
    fp32. Base and trained model of one run are scored alike (pass the trained one's)."""
    if trained == "fp32":
        return "none"
    return "bf16" if resolve_dtype("auto", device) == "bf16" else "none"


def autocast(device: str, precision: str) -> contextlib.AbstractContextManager[Any]:
    """bf16 autocast for the forward pass, or nothing for fp32."""
    import torch

    if precision == "bf16":
        return torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16)
    return contextlib.nullcontext()


def has_generation_markers(template: str | None) -> bool:
    import re

    return bool(template) and re.search(r"\{%-?\s*generation\s*-?%\}", template or "") is not None


def quiet_transformers() -> None:
    """No per-file progress bars ("Loading weights", "Writing model shards") from
    transformers: our own progress reports training, and the bars fill run logs."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def load_student(path: str | Path, device: str = "cpu") -> tuple[Any, Any]:
    """(model, tokenizer) from a transformers folder; raises :class:`ConfigError` when the
    folder cannot be loaded or its chat template cannot mark assistant tokens."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ..llm.chat_template import chat_template, needs_tool_template
    from ..llm.models import resolve_model

    quiet_transformers()

    if str(path) == "tiny":
        raise ConfigError("the tiny student is built from data by train-sft; pass its folder")
    path = Path(resolve_model(path))
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path))
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype="float32")
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot load the model in {path}: {exc}") from exc
    if needs_tool_template(getattr(tokenizer, "chat_template", None)):
        # a ChatML model whose template cannot show tools: the tool-call template
        tokenizer.chat_template = chat_template("signature")
    if not has_generation_markers(getattr(tokenizer, "chat_template", None)):
        try:
            from trl.chat_template_utils import get_training_chat_template

            tokenizer.chat_template = get_training_chat_template(tokenizer)
        except Exception as exc:
            raise ConfigError(
                f"the chat template of {path} has no {{% generation %}} markers, so assistant "
                "tokens cannot be told apart",
                hint="train from --model tiny, or add generation markers to the template",
            ) from exc
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.to(device)  # type: ignore[arg-type]  # transformers types .to's first argument as a model
    return model, tokenizer


def use_tool_format(tokenizer: Any, tool_format: str, model: str | Path) -> None:
    """Give ``tokenizer`` trajsynth's chat template in ``tool_format``
    (:func:`~trajsynth.llm.chat_template.chat_template`); only a model already on that
    template (a prepared SmolLM2, a checkpoint trained from one) may change how it shows
    tools: a model with a template of its own keeps the prompts it was trained on."""
    from ..llm.chat_template import chat_template, template_format

    if template_format(getattr(tokenizer, "chat_template", None)) is None:
        raise ConfigError(
            f"tool_format {tool_format!r} needs a model on trajsynth's chat template; "
            f"{model} brings a template of its own",
            hint="leave tool_format at model",
        )
    tokenizer.chat_template = chat_template(tool_format)  # type: ignore[arg-type]


class LoRASettings(StrictModel):
    """The LoRA settings SFT and GRPO share (:func:`with_lora`)."""

    lora_r: int = Field(
        default=0,
        ge=0,
        description="LoRA rank (PyPI peft) on every linear layer of a pretrained model; 0: "
        "full fine-tuning. The adapters are merged into the saved model.",
    )
    lora_alpha: float = Field(default=32.0, gt=0, description="LoRA scale numerator (α / r).")
    lora_layers: int = Field(
        default=0,
        ge=0,
        description="Adapt only the top N transformer blocks (0: all). The backward pass stops "
        "at the lowest adapted block, so a CPU step costs less.",
    )


def with_lora(model: Any, r: int, alpha: float, layers: int = 0) -> Any:
    """LoRA adapters of rank ``r`` (scale ``alpha / r``) on every linear layer but the output
    head, in the top ``layers`` transformer blocks (0: all); returns the peft model, whose
    ``merge_and_unload()`` gives back a plain model."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as exc:
        raise ConfigError("LoRA needs the package peft", hint="pip install peft") from exc
    import torch

    head = model.get_output_embeddings()
    linear = sorted(
        {
            name.rsplit(".", 1)[-1]
            for name, module in model.named_modules()
            if isinstance(module, torch.nn.Linear) and module is not head
        }
    )
    blocks = int(getattr(model.config, "num_hidden_layers", 0) or 0)
    top = list(range(max(0, blocks - layers), blocks)) if layers and blocks else None
    lora = LoraConfig(
        r=r,
        lora_alpha=alpha,  # type: ignore[arg-type]  # peft annotates int; it divides it by r
        lora_dropout=0.0,
        target_modules=linear,
        layers_to_transform=top,
        task_type="CAUSAL_LM",
    )
    with warnings.catch_warnings():  # peft asks a deprecated transformers property
        warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")
        return get_peft_model(model, lora)


def train_top_blocks(model: Any, layers: int) -> int:
    """Full fine-tuning of the top ``layers`` transformer blocks and the final norm only: the
    embeddings (the output head too where they are tied, as in SmolLM2) and every block below
    are frozen, so the backward pass stops at the lowest trained block. Returns the number
    of trainable parameters."""
    import torch

    depth = getattr(model.config, "num_hidden_layers", None)
    blocks = next(
        (m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == depth),
        None,
    )
    if blocks is None:
        raise ConfigError(
            "train_layers needs a model whose transformer blocks it can find",
            hint="use train_layers: 0 (every weight) or LoRA (lora_r, lora_layers)",
        )
    for p in model.parameters():
        p.requires_grad_(False)
    for block in list(blocks)[max(0, len(blocks) - layers) :]:
        for p in block.parameters():
            p.requires_grad_(True)
    norm = getattr(getattr(model, "model", model), "norm", None)
    if isinstance(norm, torch.nn.Module):
        for p in norm.parameters():
            p.requires_grad_(True)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def selected_logprobs(
    model: Any, input_ids: Any, position_ids: Any, select: Any, temperature: float = 1.0
) -> Any:
    """log p(input_ids[:, t+1] | input_ids[:, :t+1]) at every t where ``select[:, t+1]``,
    under the distribution softmax(logits / ``temperature``) (a sampler's policy).

    ``input_ids``, ``position_ids``, ``select``: (B, T). Returns a flat (N,) tensor in row-major
    order of the selected positions, N = select[:, 1:].sum(). The LM head runs only on those N
    positions (module docstring).
    """
    import torch

    targets = input_ids[:, 1:]  # (B, T-1)
    keep = select[:, 1:].bool()  # (B, T-1)
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    head = model.get_output_embeddings()
    if decoder is not None and head is not None and not _has_softcap(model):
        # use_cache=False matters: with a cache, transformers skips the packed-sequence mask
        # and lets packed sequences attend to each other
        hidden = decoder(
            input_ids=input_ids, position_ids=position_ids, use_cache=False
        ).last_hidden_state
        h = hidden[:, :-1][keep]  # (N, d)
        logits = head(h).float()  # (N, V)
    else:  # any other causal LM: full logits, then select
        out = model(input_ids=input_ids, position_ids=position_ids, use_cache=False)
        logits = out.logits[:, :-1][keep].float()  # (N, V)
    if temperature != 1.0:
        logits = logits / temperature
    # -cross_entropy is log_softmax + gather, fused (one pass over the N × V logits)
    return -torch.nn.functional.cross_entropy(logits, targets[keep], reduction="none")  # (N,)


def _has_softcap(model: Any) -> bool:
    cfg = getattr(model, "config", None)
    return bool(getattr(cfg, "final_logit_softcapping", None))
