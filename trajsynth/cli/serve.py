"""``trajsynth serve``: an OpenAI-compatible server over the simulator or a local model.

    trajsynth serve --backend sim --port 8000
    trajsynth serve --backend sim --port 0 --latency-ms 200 --fault-rate 0.2
    trajsynth serve --backend local --model runs/tiny/artifacts/sft/final
    trajsynth serve --backend local --model smollm2-135m
    trajsynth serve --backend sim --port 0 --batch-delay 2   # /v1/batches complete after 2 s

It prints ``listening on http://HOST:PORT/v1`` once ready (``--port 0`` picks a free port,
which tests read from that line) and runs until interrupted.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Literal

import typer

from ..core.errors import ConfigError
from . import app

MODEL = "Model"
FAULTS = "Faults and latency"


@app.command(rich_help_panel="Tools and environments")
def serve(
    backend: Annotated[
        Literal["sim", "local"],
        typer.Option(help="The simulator or a local model.", rich_help_panel=MODEL),
    ] = "sim",
    model: Annotated[
        str | None,
        typer.Option(
            metavar="MODEL",
            help="Model folder or name, e.g. smollm2-135m (backend local).",
            show_default=False,
            rich_help_panel=MODEL,
        ),
    ] = None,
    host: Annotated[str, typer.Option(metavar="HOST", help="Address to listen on.")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(help="Port (0 = any free port).")] = 8000,
    latency_ms: Annotated[
        str,
        typer.Option(
            "--latency-ms",
            metavar="MS",
            help="Latency: 200 (fixed), 100:300 (uniform), exp:200 (exponential, mean).",
            rich_help_panel=FAULTS,
        ),
    ] = "0",
    fault_rate: Annotated[
        float,
        typer.Option(
            "--fault-rate", help="Share of requests that fail on purpose.", rich_help_panel=FAULTS
        ),
    ] = 0.0,
    fault_mix: Annotated[
        str,
        typer.Option(
            "--fault-mix",
            metavar="KINDS",
            help="Faults to draw from: 429,500,timeout,garbage.",
            rich_help_panel=FAULTS,
        ),
    ] = "429,500,timeout,garbage",
    retry_after_ms: Annotated[
        float,
        typer.Option(
            "--retry-after-ms",
            help="retry-after sent with injected 429s.",
            rich_help_panel=FAULTS,
        ),
    ] = 100.0,
    hang_s: Annotated[
        float,
        typer.Option(
            "--hang-s",
            help="How long an injected timeout holds the connection.",
            rich_help_panel=FAULTS,
        ),
    ] = 30.0,
    seed: Annotated[
        int, typer.Option(help="Seed of the fault and latency draws.", rich_help_panel=FAULTS)
    ] = 0,
    sim_config: Annotated[
        str | None,
        typer.Option(
            "--sim-config",
            metavar="JSON",
            help="Simulator settings as JSON, e.g. '{\"seed\": 1}'.",
            rich_help_panel=MODEL,
        ),
    ] = None,
    ignore_n: Annotated[
        bool,
        typer.Option(
            "--ignore-n",
            help="Answer one choice whatever n is (old servers).",
            rich_help_panel=MODEL,
        ),
    ] = False,
    model_name: Annotated[
        str | None,
        typer.Option(
            "--model-name",
            metavar="NAME",
            help="Name reported in /v1/models.",
            rich_help_panel=MODEL,
        ),
    ] = None,
    batch_delay: Annotated[
        float,
        typer.Option("--batch-delay", help="Seconds until a /v1/batches batch completes."),
    ] = 1.0,
    uvloop: Annotated[bool, typer.Option(help="Use uvloop when installed.")] = True,
) -> None:
    """Serve an OpenAI-compatible API over sim or a local model.

    Endpoints: /v1/chat/completions, /v1/models, /v1/files and /v1/batches, plus /metrics.
    """
    from ..llm.base import Backend, RoleConfig
    from ..llm.server import READY_LINE, Latency, ServerOptions
    from ..llm.server import serve as run_server

    if backend == "sim":
        from pydantic import ValidationError

        from ..llm.sim import SimBackend, SimConfig

        try:
            cfg = SimConfig.model_validate(json.loads(sim_config) if sim_config else {})
        except (ValueError, ValidationError) as exc:
            raise ConfigError(f"--sim-config: {exc}".splitlines()[0]) from None
        engine: Backend = SimBackend(cfg, role="generic", model=model_name or "sim")
        name = model_name or "sim"
    else:  # local
        from ..llm.local import LocalBackend
        from ..llm.models import resolve_model

        if model is None:
            raise ConfigError("--backend local needs --model PATH|NAME (a model folder or name)")
        folder = resolve_model(model)
        if folder == "tiny":
            raise ConfigError("--model tiny is built by train-sft; serve its output folder")
        local = LocalBackend(RoleConfig(backend="local", model=folder))
        local.load()
        engine = local
        name = model_name or (model if "/" not in model else Path(folder).name)

    options = ServerOptions(
        model_name=name,
        latency=Latency.parse(latency_ms),
        fault_rate=fault_rate,
        fault_mix=tuple(k.strip() for k in fault_mix.split(",") if k.strip()),
        retry_after_ms=retry_after_ms,
        hang_s=hang_s,
        seed=seed,
        ignore_n=ignore_n,
        parse_calls=backend == "local",
        batch_delay_s=batch_delay,
    )

    def ready(bound_host: str, bound_port: int) -> None:
        print(f"{READY_LINE}http://{bound_host}:{bound_port}/v1", flush=True)
        sys.stdout.flush()

    run_server(engine, options, host=host, port=port, use_uvloop=uvloop, on_ready=ready)
