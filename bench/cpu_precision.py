"""bf16 autocast against fp32 on the CPU: what ``precision: auto`` buys where the CPU has AMX.

``resolve_dtype("auto", "cpu")`` picks bf16 autocast when the CPU multiplies bf16 matrices in
hardware (Intel AMX tiles; :func:`trajsynth.train.modeling.cpu_has_bf16_matmul`), fp32
otherwise, and fp32 for the tiny student trained from scratch, which learns worse in bf16.
This measures both on SmolLM2-135M-Instruct (``trajsynth models pull smollm2-135m``), the
same work each time:

1) training: full fine-tuning with :func:`trajsynth.train.sft.train_sft`, ``--steps`` steps of
   one packed row of ``--max-len`` tokens from the same trajectories (gold trajectories of
   built-in example tasks), precision ``fp32`` then ``bf16``, alternating for ``--repeat``
   rounds; each keeps its best round's tokens/s, and the loss after the last step says
   whether bf16 learns the same (weights and AdamW state stay fp32 in both);
2) generation: BFCL v4 simple_python and irrelevance (``--limit`` questions each) answered
   greedily by the local backend with ``autocast`` ``none`` then ``bf16``: seconds, and the
   share of questions whose answer text is the same.

Figures: ``train_speedup`` (bf16 ÷ fp32 tokens/s), ``gen_speedup`` (fp32 ÷ bf16 seconds),
``same_answers``; ``amx`` says whether ``auto`` would pick bf16 here (without AMX, bf16 on a
CPU is emulated and the speedups fall below 1, which is why ``auto`` keeps fp32 there).

Run: python bench/cpu_precision.py [--steps 12] [--max-len 1024] [--repeat 2] [--limit 16]
The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def make_rows(n: int) -> list[Any]:
    from trajsynth.train.synth import env_maker, gold_trajectory, task_variants

    tasks = task_variants(n, seed=0, distractors=2)
    make_env = env_maker(max_observation_chars=400)
    return [gold_trajectory(t, make_env) for t in tasks]


def train(rows: list[Any], model: str, precision: str, args: Any, out: Path) -> dict[str, Any]:
    from trajsynth.train.sft import SFTConfig, train_sft

    cfg = SFTConfig(
        model=model,
        lora_r=0,
        lr=1e-4,
        max_steps=args.steps,
        batch_size=1,
        max_len=args.max_len,
        warmup_ratio=0.0,
        device="cpu",
        precision=precision,  # type: ignore[arg-type]
        resume=False,
    )
    shutil.rmtree(out, ignore_errors=True)
    r = train_sft(rows, out, cfg)
    shutil.rmtree(out, ignore_errors=True)
    return {"tokens_per_s": r.tokens_per_s, "final_loss": r.final_loss, "precision": r.precision}


def generate(model: str, autocast: str, limit: int) -> tuple[float, list[str]]:
    from trajsynth.llm.base import RoleConfig
    from trajsynth.llm.client import LLMClient
    from trajsynth.llm.local import LocalBackend
    from trajsynth.train.bfcl import BfclConfig, evaluate_bfcl

    local = {"device": "cpu", "batch_size": 16, "autocast": autocast}
    role = RoleConfig(backend="local", model=model, local=local)
    client = LLMClient("student", role, LocalBackend(role), None)
    started = time.perf_counter()
    report = evaluate_bfcl(
        client, BfclConfig(categories=["simple_python", "irrelevance"], limit=limit)
    )
    texts = [str(a.get("raw")) for a in report.answers]
    return time.perf_counter() - started, texts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=12, help="SFT steps per run.")
    ap.add_argument("--max-len", type=int, default=1024, help="Tokens per packed row.")
    ap.add_argument("--repeat", type=int, default=2, help="Alternating rounds per precision.")
    ap.add_argument("--limit", type=int, default=16, help="BFCL questions per category.")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    import torch

    from trajsynth.llm.models import pull
    from trajsynth.train.modeling import cpu_has_bf16_matmul

    model = str(pull("smollm2-135m"))
    rows = make_rows(200)
    tmp = Path(tempfile.mkdtemp(prefix="trajsynth-bench-precision-"))
    runs: dict[str, list[dict[str, Any]]] = {"fp32": [], "bf16": []}
    for _ in range(args.repeat):
        for precision in runs:
            runs[precision].append(train(rows, model, precision, args, tmp / precision))
            print(f"train {precision}: {runs[precision][-1]['tokens_per_s']:.1f} tokens/s, "
                  f"loss {runs[precision][-1]['final_loss']:.3f}", flush=True)  # fmt: skip
    best = {p: max(rs, key=lambda r: r["tokens_per_s"]) for p, rs in runs.items()}
    gen_fp32, answers_fp32 = generate(model, "none", args.limit)
    gen_bf16, answers_bf16 = generate(model, "bf16", args.limit)
    shutil.rmtree(tmp, ignore_errors=True)
    same = sum(a == b for a, b in zip(answers_fp32, answers_bf16, strict=True))

    print(f"{'':<10}{'train tok/s':>12}{'final loss':>12}{'BFCL s':>9}")
    for p, gen in (("fp32", gen_fp32), ("bf16", gen_bf16)):
        print(f"{p:<10}{best[p]['tokens_per_s']:>12.1f}{best[p]['final_loss']:>12.3f}{gen:>9.1f}")
    print(f"same answers: {same} of {len(answers_fp32)}")
    print(json.dumps({
        "bench": "cpu_precision",
        "amx": cpu_has_bf16_matmul(),
        "threads": torch.get_num_threads(),
        "steps": args.steps,
        "max_len": args.max_len,
        "train_tokens_per_s_fp32": round(best["fp32"]["tokens_per_s"], 1),
        "train_tokens_per_s_bf16": round(best["bf16"]["tokens_per_s"], 1),
        "train_speedup": round(best["bf16"]["tokens_per_s"] / best["fp32"]["tokens_per_s"], 2),
        "final_loss_fp32": round(best["fp32"]["final_loss"], 4),
        "final_loss_bf16": round(best["bf16"]["final_loss"], 4),
        "gen_seconds_fp32": round(gen_fp32, 1),
        "gen_seconds_bf16": round(gen_bf16, 1),
        "gen_speedup": round(gen_fp32 / gen_bf16, 2),
        "same_answers": round(same / len(answers_fp32), 3),
        "load_1min": round(os.getloadavg()[0], 2),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
