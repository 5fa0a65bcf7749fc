"""``trajsynth models``: the students ``--model`` accepts by name.

    trajsynth models list
    trajsynth models pull smollm2-135m

``pull`` prepares a registered model once (SmolLM2: its GGUF file de-quantized into a
safetensors folder in the cache); every command that takes ``--model`` also prepares it on
first use.
"""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer

from . import app
from ._common import console, err_console

models_app = typer.Typer(
    help="List the models --model accepts by name; prepare one.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
)
app.add_typer(models_app, name="models", rich_help_panel="Training")


@models_app.command("list")
def list_models(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
) -> None:
    """Registered models, their status and cache folder."""
    from rich.table import Table

    from ..llm.models import cache_dir, describe

    rows = describe()
    if as_json:
        for row in rows:
            print(json.dumps(row))
        return
    t = Table(title=f"models (cache: {cache_dir()})", title_justify="left")
    for col in ("name", "parameters", "status", "description"):
        t.add_column(col)
    for row in rows:
        t.add_row(row["name"], row["parameters"], row["status"], row["description"])
    console.print(t)
    console.print("any transformers model folder is accepted too", style="dim")


@models_app.command("pull")
def pull_model(
    name: Annotated[str, typer.Argument(help="A registered model name (see `models list`).")],
    force: Annotated[bool, typer.Option("--force", help="Prepare it again.")] = False,
) -> None:
    """Prepare a registered model in the cache (once).

    Prints the model's folder.
    """
    from ..llm.models import MODELS, entry_folder, model_status, pull

    entry = MODELS.get(name)
    if entry is not None and entry.kind != "tiny" and (force or model_status(name) != "ready"):
        err_console.print(f"preparing {name} in {entry_folder(name)} ...")
    t0 = time.perf_counter()
    folder = pull(name, force=force)
    if folder is None:
        console.print(f"{name} is built from the training data; nothing to prepare")
        return
    console.print(f"{folder}")
    err_console.print(f"[green]✓[/] {name} ready ({time.perf_counter() - t0:.1f}s)")
