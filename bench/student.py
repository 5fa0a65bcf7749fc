"""The pretrained student: SmolLM2-135M-Instruct before and after SFT on pipeline output,
against the from-scratch tiny student and the simulated teacher, on the same probe tasks.

What it does, in one process:

1) data, as the main job makes it: Magnet tasks of the math domain → a held-out probe split
   → simulated-teacher rejection sampling on the rest → verify → score → quality filter
   (a scaled-down ``pipelines/looptool.yaml`` prefix, run by the pipeline runner);
2) probes every student greedily on the same ``--probe`` held-out tasks with the shared
   episode runner and verifiers (``trajsynth.train.eval.evaluate``, the code GCP's probe and
   ``trajsynth eval`` use): exact match is LoopTool's exact multiset match at every step;
3) ``teacher``: the seeded simulated teacher (the role that made the data);
   ``base``: SmolLM2 as shipped (its tool template from ``trajsynth.llm.models``);
   ``sft``: SmolLM2 after ``--minutes`` of SFT on the filtered rows (LoRA rank ``--lora-r`` on
   the top ``--lora-layers`` blocks, or full fine-tuning with ``--lora-r 0``; one packed
   sequence of ``--max-len`` tokens per step: on a CPU many small steps learn the call format
   far sooner than few large ones); ``tiny``: the from-scratch student trained on the same
   rows for ``--tiny-minutes``.

Run: python bench/student.py [--tasks 200] [--probe 30] [--minutes 10] [--lora-r 16]
The last line is one JSON object: base_exact, sft_exact, tiny_exact, teacher_exact,
train_tokens_per_s, train_minutes (and the single-call figures, tool match, the load).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

PIPELINE = """
name: student_bench
defaults:
  seed: {seed}
  shard_rows: 5000
  env: {{max_observation_chars: 200}}
  llm:
    "*": {{backend: sim}}
stages:
  - id: tasks
    uses: magnet_tasks
    with:
      domains: [math]
      tasks_per_domain: {tasks}
      graph: {{similarity: lexical}}
      walk_steps: 2
      max_calls: 3
      split_p: 0.0
      insert_p: 0.1
      magnify_p: 0.1
      connect_p: 0.1
      distractors: 1
      system_prompt: "Complete the user's request with the tools; answer briefly."
  - id: split
    uses: split
    from: tasks
    with: {{eval_fraction: 0.25, salt: probe}}
  - id: teacher
    uses: rejection_sampling
    from: split
    with: {{n: 2, keep: first, temperature: 0.7}}
  - id: verified
    uses: verify
    from: teacher
  - id: scored
    uses: score
    from: verified
  - id: filtered
    uses: filter
    from: scored
    with: {{min_turns: 1, min_quality: 0.5}}
"""


def make_data(tmp: Path, tasks: int, seed: int) -> tuple[list, list]:
    """Step 1: (training rows, held-out probe tasks)."""
    from trajsynth.pipeline import run_pipeline
    from trajsynth.pipeline.spec import load_pipeline
    from trajsynth.store import read_records

    spec = tmp / "student.yaml"
    spec.write_text(PIPELINE.format(tasks=tasks, seed=seed))
    result = run_pipeline(load_pipeline(spec), out=tmp / "run")
    rows = read_records(result.output("filtered"))
    probe = read_records(result.output("split", "eval"))
    return rows, probe


def probe_scores(name: str, probe: list, policy: Any, max_new_tokens: int) -> dict:
    """Step 2: greedy episodes on the probe tasks, scored by the shared verifiers."""
    from trajsynth.train.eval import evaluate
    from trajsynth.train.rollout import RolloutConfig
    from trajsynth.train.synth import env_maker

    cfg = RolloutConfig(temperature=0.0, max_steps=6, max_new_tokens=max_new_tokens, max_len=1024)
    report = evaluate(probe, policy, env_maker(200), cfg, keep_episodes=True, logprobs=False)
    single = [e for e in report.episodes if "single_call" in (e["capabilities"] or [])]
    return {
        "name": name,
        "exact": report.overall.get("exact_match", 0.0),
        "tool": report.overall.get("tool_match", 0.0),
        "call": report.overall.get("call_match", 0.0),
        "single_exact": (
            sum(e["scores"]["exact_match"] for e in single) / len(single) if single else 0.0
        ),
        "format_errors": report.overall.get("format_errors", 0.0),
        "seconds": report.seconds,
        "by_capability": {c: s.get("exact_match", 0.0) for c, s in report.by_capability.items()},
    }


def teacher_player() -> Any:
    """The simulated teacher, sent each task as metadata (what the simulator reads), as GCP's
    probe of an LLM role does."""
    from trajsynth.core.task import GroundTruth
    from trajsynth.llm.client import client_for_role
    from trajsynth.stages.common.policies import sim_task
    from trajsynth.train.rollout import ChatPlayer

    def metadata(row: Any) -> dict | None:
        gt = GroundTruth.from_json(row.ground_truth)
        return {"role": "teacher", "ground_truth": sim_task(gt)} if gt else None

    client = client_for_role("teacher", {"teacher": {"backend": "sim"}})
    return ChatPlayer(client, metadata=metadata)


def local_player(folder: str) -> Any:
    """A checkpoint played token in / token out through the llm layer's local backend."""
    from trajsynth.llm.base import RoleConfig
    from trajsynth.llm.local import LocalBackend
    from trajsynth.train.rollout import ChatPlayer

    backend = LocalBackend(RoleConfig(backend="local", model=folder, local={"device": "cpu"}))
    return ChatPlayer.local(backend)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=200, help="Magnet tasks (a quarter probes).")
    ap.add_argument("--probe", type=int, default=30, help="Probe tasks (held out).")
    ap.add_argument("--minutes", type=float, default=10.0, help="SmolLM2 SFT budget.")
    ap.add_argument("--tiny-minutes", type=float, default=3.0, help="Tiny student budget.")
    ap.add_argument("--lora-r", type=int, default=16, help="LoRA rank (0: full fine-tuning).")
    ap.add_argument("--lora-layers", type=int, default=8, help="Adapt the top N blocks (0: all).")
    ap.add_argument("--lr", type=float, default=2e-3, help="Peak lr.")
    ap.add_argument("--epochs", type=float, default=4.0)
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--grad-accum", type=int, default=1)
    ap.add_argument("--max-len", type=int, default=512)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    from trajsynth.llm.models import pull
    from trajsynth.train.sft import SFTConfig, train_sft

    t_start = time.perf_counter()
    base_dir = str(pull("smollm2-135m"))
    tmp = Path(tempfile.mkdtemp(prefix="trajsynth-bench-student-"))
    rows, probe = make_data(tmp, args.tasks, args.seed)
    probe = probe[: args.probe]
    print(f"data: {len(rows)} training rows, {len(probe)} probe tasks", flush=True)

    results = []
    results.append(probe_scores("teacher (sim)", probe, teacher_player(), args.max_new_tokens))
    results.append(probe_scores("smollm2 base", probe, local_player(base_dir), args.max_new_tokens))
    print(f"base probed in {results[-1]['seconds']:.0f}s", flush=True)

    sft_cfg = SFTConfig(
        model=base_dir,
        lora_r=args.lora_r,
        lora_layers=args.lora_layers,
        lr=args.lr,
        epochs=args.epochs,
        max_minutes=args.minutes,
        batch_size=args.batch_size,
        grad_accum=args.grad_accum,
        max_len=args.max_len,
        reasoning=False,
        warmup_ratio=0.03,
        save_every=10**9,
        resume=False,
        seed=args.seed,
    )
    sft = train_sft(rows, tmp / "sft", sft_cfg)
    print(
        f"sft: {sft.steps} steps, {sft.tokens:,} tokens in {sft.seconds / 60:.1f} min "
        f"({sft.tokens_per_s:.1f} tokens/s), loss {sft.first_loss:.3f} → {sft.final_loss:.3f}",
        flush=True,
    )
    results.append(
        probe_scores("smollm2 sft", probe, local_player(str(tmp / "sft")), args.max_new_tokens)
    )

    tiny_cfg = SFTConfig(
        model="tiny",
        epochs=8,
        lr=0.005,
        max_minutes=args.tiny_minutes,
        batch_size=2,
        max_len=1024,
        reasoning=False,
        save_every=10**9,
        resume=False,
        seed=args.seed,
    )
    tiny = train_sft(rows, tmp / "tiny", tiny_cfg)
    results.append(
        probe_scores("tiny sft", probe, local_player(str(tmp / "tiny")), args.max_new_tokens)
    )

    print(
        f"{'student':<16}{'exact':>8}{'single':>8}{'tool':>8}{'call':>8}{'fmt err':>9}"
        f"{'probe s':>9}"
    )
    for r in results:
        print(
            f"{r['name']:<16}{r['exact']:>8.3f}{r['single_exact']:>8.3f}{r['tool']:>8.3f}"
            f"{r['call']:>8.3f}{r['format_errors']:>9.2f}{r['seconds']:>9.0f}"
        )
    print(f"tiny: {tiny.steps} steps in {tiny.seconds / 60:.1f} min; total "
          f"{(time.perf_counter() - t_start) / 60:.1f} min")  # fmt: skip
    by_name = {r["name"]: r for r in results}
    out = {
        "bench": "student",
        "train_rows": len(rows),
        "probe_tasks": len(probe),
        "base_exact": round(by_name["smollm2 base"]["exact"], 3),
        "sft_exact": round(by_name["smollm2 sft"]["exact"], 3),
        "tiny_exact": round(by_name["tiny sft"]["exact"], 3),
        "teacher_exact": round(by_name["teacher (sim)"]["exact"], 3),
        "sft_single_exact": round(by_name["smollm2 sft"]["single_exact"], 3),
        "teacher_single_exact": round(by_name["teacher (sim)"]["single_exact"], 3),
        "sft_tool_match": round(by_name["smollm2 sft"]["tool"], 3),
        "train_tokens_per_s": round(sft.tokens_per_s, 1),
        "train_minutes": round(sft.seconds / 60, 2),
        "lora_r": args.lora_r,
        "lora_layers": args.lora_layers,
        "load_1min": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
