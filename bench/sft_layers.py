"""Full fine-tuning of every weight against the top blocks only (``train_layers``), same run.

What it measures: SFT tokens/s (non-padding tokens through forward + backward + AdamW step)
of SmolLM2-135M-Instruct (``trajsynth models pull smollm2-135m``) trained in full, every
weight, and with only its top ``--layers`` blocks and final norm trained (embeddings and the
blocks below frozen, so the backward pass stops at the lowest trained block), on the same
rows (gold trajectories of varied built-in example tasks, tools shown as
``tool_format: described``), the same packing (one row of ``--max-len`` tokens a step),
learning rate and precision (``precision: auto``: bf16 autocast on a CPU with AMX). The
settings alternate for ``--repeat`` rounds and each keeps its best, so load from other
processes does not decide the ratio. ``ratio_N`` is the tokens/s of ``train_layers: N`` over
every weight's: how many more steps the same minutes give.

Run: python bench/sft_layers.py [--layers 20 15] [--steps 8] [--repeat 2]
The last line is one JSON object: ``full_tokens_per_s``, ``tokens_per_s_N`` and ``ratio_N``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import tempfile
import warnings
from pathlib import Path


def run(rows: list, model: str, layers: int, steps: int, max_len: int, out: Path) -> float:
    from trajsynth.train.sft import SFTConfig, train_sft

    cfg = SFTConfig(
        model=model,
        train_layers=layers,
        max_steps=steps,
        batch_size=1,
        max_len=max_len,
        lr=1e-4,
        warmup_ratio=0.0,
        reasoning=False,
        tool_format="described",
        resume=False,
    )
    shutil.rmtree(out, ignore_errors=True)
    return train_sft(rows, out, cfg).tokens_per_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, nargs="+", default=[20, 15])
    ap.add_argument("--rows", type=int, default=200)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--max-len", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    from trajsynth.llm.models import pull
    from trajsynth.train.synth import env_maker, gold_trajectory, task_variants

    make_env = env_maker(max_observation_chars=400)
    rows = [gold_trajectory(t, make_env) for t in task_variants(args.rows, seed=0, distractors=2)]
    model = str(pull("smollm2-135m"))
    tmp = Path(tempfile.mkdtemp(prefix="trajsynth-bench-layers-"))
    settings = [0, *args.layers]
    best: dict[int, float] = {n: 0.0 for n in settings}
    for _ in range(args.repeat):
        for n in settings:
            best[n] = max(best[n], run(rows, model, n, args.steps, args.max_len, tmp / "out"))
    shutil.rmtree(tmp, ignore_errors=True)

    print(f"{'trained blocks':<16}{'tokens/s':>10}{'ratio':>8}")
    for n in settings:
        print(f"{n or 'all':<16}{best[n]:>10,.1f}{best[n] / best[0]:>8.2f}")
    result: dict[str, object] = {"bench": "sft_layers", "steps": args.steps,
                                 "full_tokens_per_s": round(best[0], 1)}  # fmt: skip
    for n in args.layers:
        result[f"tokens_per_s_{n}"] = round(best[n], 1)
        result[f"ratio_{n}"] = round(best[n] / best[0], 3)
    result["load_1min"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
