"""Requests a person would write: the simulated query writer's requests and the teacher's
thoughts, this checkout against a base revision (``main`` by default), on the same tasks.

Both sides run the same generation in a child process: Magnet tasks (``magnet_tasks``,
``tasks_per_domain`` per domain, lexical graph, 6 distractors) then one teacher rollout per
task (``rejection_sampling``, n = 1), on

- ``builtin``: the five built-in domains (travel, files, messaging, commerce, math);
- ``tau_bench``, ``toolalpaca``, ``stabletoolbench``: tool collections written by others,
  imported from ``$TRAJSYNTH_EXTERNAL`` (default ``../shared/external``) with
  ``trajsynth.envs.import_tools``, each one domain run in the ``simulated`` environment.

The base side is the base revision's ``trajsynth`` package, extracted with ``git archive``
into a temporary folder and imported from there (the child puts it first on ``sys.path``);
nothing of the base is kept in this repository. Every figure is computed here, with this
checkout's code, from what each child wrote:

- ``requests``: the gold turns' requests (``ground_truth.turns[*].request``);
- ``distinct_1/2/3``: distinct word n-grams / all word n-grams of the pooled requests
  (lower-cased words and punctuation marks), per collection;
- ``self_bleu``: each of up to ``SAMPLE`` requests (seeded) scored by BLEU-4 against all the
  others of its collection as references (nltk's ``sentence_bleu``, smoothing method 1;
  lower is more diverse), averaged;
- ``quote_share``: share of requests that repeat 6 consecutive words of any offered tool's
  description (the row's ``tools``; goal 0);
- ``stated_share``: share of the argument values the user must give that the request states
  (:func:`trajsynth.core.surface.find`: verbatim or one of the recorded forms, "March 5, 2024"
  for "2024-03-05", ...; goal 1.0). A value the user need not give: bound to an earlier
  call's output (the task's bindings), written in an earlier output of the same turn (the
  request may refer to it), or given by a clarification
  (:func:`trajsynth.stages.common.queries.must_state`). ``transformed_share``: share of the
  stated values written in a form other than verbatim, with ``forms`` counting each form;
- ``thoughts``: the teacher's reasoning strings of the rollouts; ``thought_openings``: their
  distinct first three words / all, and ``top_opening_share``: the share of the commonest one.

Nothing here is a test: it prints a table, then one JSON line.

Run: PYTHONPATH=. python bench/phrasing.py [--base REF] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EXTERNAL = Path(os.environ.get("TRAJSYNTH_EXTERNAL") or REPO.parent / "shared" / "external")
IMPORTED = [
    ("tau_bench", "tau-bench", "tau"),
    ("toolalpaca", "toolalpaca/data", "toolalpaca"),
    ("stabletoolbench", "stabletoolbench", "stabletoolbench"),
]
SAMPLE = 200
_WORDS = re.compile(r"\w+|[^\w\s]")

# --------------------------------------------------------------------------------------
# the child: generate with one side's code, write what the figures need
# --------------------------------------------------------------------------------------


def generate(root: Path, out: Path, tasks: int) -> None:
    """Run in a child whose ``sys.path`` starts with ``root`` (that side's ``trajsynth``)."""
    sys.path.insert(0, str(root))
    import trajsynth

    assert Path(trajsynth.__file__).resolve().is_relative_to(root.resolve()), trajsynth.__file__
    with tempfile.TemporaryDirectory(prefix="phrasing-gen-") as tmp:
        out.write_text(json.dumps(_generate(Path(tmp), tasks)))


def _generate(work: Path, tasks: int) -> dict[str, Any]:
    import trajsynth
    from trajsynth.envs import import_tools
    from trajsynth.pipeline import run_pipeline
    from trajsynth.store import read_records

    pipeline = work / "pipeline.yaml"
    pipeline.write_text(
        "name: phrasing\n"
        "defaults: {seed: 0}\n"
        "stages:\n"
        f"  - {{id: tasks, uses: magnet_tasks, with: {{tasks_per_domain: {tasks}}}}}\n"
        "  - {id: rollouts, uses: rejection_sampling, from: tasks, with: {n: 1}}\n"
    )
    runs: list[tuple[str, list[str]]] = [("builtin", [])]
    for name, src, fmt in IMPORTED:
        ts = import_tools(EXTERNAL / src, fmt)
        path = ts.save(work / f"{name}.json")
        runs.append(
            (
                name,
                [
                    f"defaults.env.toolsets={{{name}: {path}}}",
                    "defaults.env.domains=[]",
                    f"stages.tasks.with.max_candidates={10 * tasks}",
                    "stages.tasks.with.graph.similarity=lexical",
                    "stages.tasks.with.distractors=6",
                ],
            )
        )
    result: dict[str, Any] = {"trajsynth": str(Path(trajsynth.__file__).parent)}
    for name, overrides in runs:
        run = run_pipeline(str(pipeline), out=work / f"run-{name}", overrides=overrides)
        rows = []
        for r in read_records(run.output("tasks")):
            gt = r.ground_truth  # typed on today's rows, a dict on an older checkout's
            gt = gt.model_dump(mode="json") if hasattr(gt, "model_dump") else (gt or {})
            rows.append(
                {
                    "domain": r.domain,
                    "tools": [
                        (t.get("function") or t).get("description") or "" for t in r.tools or []
                    ],
                    "ground_truth": gt,
                }
            )
        thoughts = []
        for output in ("main", "failed"):
            folder = run.output("rollouts", output)
            if any(folder.glob("*.parquet")):
                for r in read_records(folder):
                    thoughts += [
                        m.reasoning for m in r.messages if m.role == "assistant" and m.reasoning
                    ]
        result[name] = {"rows": rows, "thoughts": thoughts}
    return result


# --------------------------------------------------------------------------------------
# the figures
# --------------------------------------------------------------------------------------


def _tokens(text: str) -> list[str]:
    return _WORDS.findall(text.lower())


def distinct(texts: list[str], n: int) -> float:
    grams: list[tuple[str, ...]] = []
    for t in texts:
        w = _tokens(t)
        grams += [tuple(w[i : i + n]) for i in range(len(w) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0


def self_bleu(texts: list[str], seed: int = 0) -> float:
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

    sample = random.Random(seed).sample(texts, min(SAMPLE, len(texts)))
    toks = [_tokens(t) for t in sample]
    smooth = SmoothingFunction().method1
    scores = [
        sentence_bleu(toks[:i] + toks[i + 1 :], hyp, smoothing_function=smooth)
        for i, hyp in enumerate(toks)
    ]
    return sum(scores) / len(scores) if scores else 0.0


def figures(side: dict[str, Any]) -> dict[str, dict[str, Any]]:
    from trajsynth.core.surface import find
    from trajsynth.core.task import GroundTruth
    from trajsynth.llm.sim.phrasing import quotes_description
    from trajsynth.stages.common.queries import must_state

    table: dict[str, dict[str, Any]] = {}
    for name, data in side.items():
        if name == "trajsynth":
            continue
        rows = data["rows"]
        tasks = [(GroundTruth.from_json(r["ground_truth"]), r["tools"]) for r in rows]
        requests = [t.request for gt, _ in tasks for t in gt.turns if t.request]
        quotes = sum(
            1
            for gt, tools in tasks
            for t in gt.turns
            if t.request and quotes_description(t.request, tools)
        )
        forms: Counter[str] = Counter()
        must = [(gt.turns[t].request, k, v) for gt, _ in tasks for t, k, v in must_state(gt)]
        missing = []
        for request, k, v in must:
            form = find(v, request, k)
            forms[form or "missing"] += 1
            if form is None:
                missing.append({"request": request, "param": k, "value": v})
        stated_n = sum(n for f, n in forms.items() if f != "missing")
        thoughts = data["thoughts"]
        openings = Counter(" ".join(_tokens(t)[:3]) for t in thoughts)
        table[name] = {
            "tasks": len(rows),
            "requests": len(requests),
            "distinct_1": round(distinct(requests, 1), 4),
            "distinct_2": round(distinct(requests, 2), 4),
            "distinct_3": round(distinct(requests, 3), 4),
            "self_bleu": round(self_bleu(requests), 4),
            "quote_share": round(quotes / max(1, len(requests)), 4),
            "values": len(must),
            "stated_share": round(stated_n / max(1, len(must)), 4),
            "transformed_share": round(
                sum(n for f, n in forms.items() if f not in ("missing", "verbatim"))
                / max(1, stated_n),
                4,
            ),
            "forms": dict(sorted(forms.items())),
            "missing_examples": missing[:3],
            "thoughts": len(thoughts),
            "thought_openings": round(len(openings) / max(1, len(thoughts)), 4),
            "distinct_openings": len(openings),
            "top_opening_share": round(
                openings.most_common(1)[0][1] / len(thoughts) if thoughts else 0.0, 4
            ),
            "thought_distinct_2": round(distinct(thoughts, 2), 4),
        }
    return table


def _extract(base: str, into: Path) -> Path:
    """The base revision's ``trajsynth`` package, from ``git archive``."""
    archive = into / "base.tar"
    with archive.open("wb") as fh:
        done = subprocess.run(
            ["git", "archive", base, "trajsynth"], cwd=REPO, stdout=fh, stderr=subprocess.PIPE
        )
    if done.returncode != 0:
        sys.exit(f"phrasing: cannot read revision {base!r}: {done.stderr.decode().strip()}")
    root = into / "base"
    with tarfile.open(archive) as tar:
        tar.extractall(root, filter="data")
    return root


def _side(root: Path, out: Path, tasks: int) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TRAJSYNTH_EXTERNAL"] = str(EXTERNAL)
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import phrasing; "
        "from pathlib import Path; phrasing.generate(Path(sys.argv[2]), Path(sys.argv[3]), "
        "int(sys.argv[4]))"
    )
    subprocess.run(
        [sys.executable, "-c", code, str(Path(__file__).parent), str(root), str(out), str(tasks)],
        check=True,
        cwd=out.parent,
        env=env,
    )
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="main", help="git revision to compare with")
    parser.add_argument("--quick", action="store_true", help="4 tasks per domain, not 12")
    args = parser.parse_args()
    if not EXTERNAL.is_dir():
        sys.exit(f"phrasing: {EXTERNAL} not found (set TRAJSYNTH_EXTERNAL)")
    tasks = 4 if args.quick else 12
    with tempfile.TemporaryDirectory(prefix="phrasing-") as tmp:
        work = Path(tmp)
        base_root = _extract(args.base, work)
        sides = {
            args.base: figures(_side(base_root, work / "base.json", tasks)),
            "this": figures(_side(REPO, work / "this.json", tasks)),
        }
    keys = [
        "requests", "distinct_1", "distinct_2", "distinct_3", "self_bleu", "quote_share",
        "stated_share", "transformed_share", "thoughts", "thought_openings", "top_opening_share",
    ]  # fmt: skip
    print(f"{'collection':16s} {'side':6s} " + " ".join(f"{k[:12]:>12s}" for k in keys))
    for name in sides["this"]:
        for label, table in sides.items():
            row = table[name]
            cells = " ".join(f"{row[k]:>12}" for k in keys)
            print(f"{name:16s} {label[:6]:6s} {cells}")
    print(json.dumps({"tasks_per_domain": tasks, "base": args.base, **sides}))


if __name__ == "__main__":
    main()
