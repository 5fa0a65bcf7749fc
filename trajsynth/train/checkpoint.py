"""Checkpoints shared by the trainers: ``OUT/checkpoint`` holds the model and tokenizer as a
transformers folder plus ``optimizer.pt`` and ``state.json`` (step, settings hash, data hash).

A checkpoint becomes visible only by an atomic rename of a fully written folder, so a run
killed while saving resumes from the previous one. A checkpoint written with other settings
or data is refused with a message that says how to start over.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError
from .tiny import save_tokenizer

__all__ = ["CHECKPOINT", "load_state", "save_checkpoint", "save_model"]

CHECKPOINT = "checkpoint"
EXTRA = "extra.pt"


def save_model(out: Path, model: Any, tokenizer: Any) -> None:
    """Model, generation config and tokenizer as a transformers folder."""
    from .modeling import quiet_transformers

    quiet_transformers()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    save_tokenizer(tokenizer, out)


def save_checkpoint(
    out: Path,
    model: Any,
    tokenizer: Any,
    optimizer: Any,
    state: dict[str, Any],
    *,
    extra: dict[str, Any] | None = None,
) -> None:
    """Write ``out/checkpoint`` atomically (write a temporary folder, then rename);
    ``extra``: tensors and values a trainer keeps beside the model (a critic's state)."""
    import torch

    tmp = out / (CHECKPOINT + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    save_model(tmp, model, tokenizer)
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    if extra is not None:
        torch.save(extra, tmp / EXTRA)
    (tmp / "state.json").write_text(json.dumps(state, indent=2))
    final, old = out / CHECKPOINT, out / (CHECKPOINT + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)


def load_state(out: Path, identity: str, data: str, *, resume: bool) -> dict[str, Any] | None:
    """The checkpoint's state when resuming is asked for and the checkpoint matches."""
    ckpt = out / CHECKPOINT
    if not resume or not (ckpt / "state.json").is_file():
        return None
    state = json.loads((ckpt / "state.json").read_text())
    if state.get("config") != identity or state.get("data") != data:
        raise ConfigError(
            f"{ckpt} was written by a run with other settings or data",
            hint="run with the same options to resume, pass --no-resume, or use another --out",
        )
    return state


def load_optimizer(out: Path, optimizer: Any, device: str) -> None:
    import torch

    path = out / CHECKPOINT / "optimizer.pt"
    optimizer.load_state_dict(torch.load(path, map_location=device, weights_only=True))


def load_extra(out: Path) -> dict[str, Any] | None:
    """What :func:`save_checkpoint` kept as ``extra`` (None when nothing was)."""
    import torch

    path = out / CHECKPOINT / EXTRA
    if not path.is_file():
        return None
    return dict(torch.load(path, map_location="cpu", weights_only=True))


def finish(out: Path) -> None:
    """Remove the checkpoint once the final model is saved."""
    shutil.rmtree(out / CHECKPOINT, ignore_errors=True)
