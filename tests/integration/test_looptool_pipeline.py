"""The main job, ``pipelines/looptool.yaml``, scaled down with ``--set``: it runs the loop
(train → GCP → JGLV → EDDE → next data) for 2 iterations offline, writes the final dataset and
``report.json`` of the documented shape; the same pipeline runs against ``trajsynth serve
--backend sim`` on 127.0.0.1 by changing only ``llm:`` settings.

Run: PYTHONPATH=. python -m pytest tests/integration/test_looptool_pipeline.py -q
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

pytest.importorskip("torch")
pytest.importorskip("transformers")

from trajsynth.llm.client import reset_clients
from trajsynth.llm.server import spawn_server
from trajsynth.pipeline import run_pipeline
from trajsynth.pipeline.spec import load_pipeline
from trajsynth.stages.common.looptool import ORIGINS
from trajsynth.store import read_records

REPO = Path(__file__).resolve().parents[2]
PIPELINE = REPO / "pipelines" / "looptool.yaml"

#: a small variant: one domain, few tasks, a very small from-scratch student (the tiny model,
#: not SmolLM2: the demo's student is measured by ``make demo`` and ``bench/student.py``),
#: short generations
TINY_SFT = (
    "{model: tiny, epochs: 2, lr: 0.005, max_len: 768, batch_size: 2, reasoning: false, "
    "tiny: {hidden_size: 32, num_layers: 1, num_heads: 2, num_kv_heads: 2, "
    "intermediate_size: 64, vocab_size: 512}}"
)
SMALL = [
    "stages.tasks.with.domains=[math]",
    "stages.tasks.with.tasks_per_domain=16",
    "stages.split.with.eval_fraction=0.4",
    "stages.teacher.with.n=1",
    "stages.noisy.with.rate=1.0",  # every row it can: the seed split keeps a few of five
    "stages.round.iterations=2",
    f"stages.round.stages.train.with.sft={TINY_SFT}",
    "stages.round.stages.train.with.warm_epochs=1",
    "stages.round.stages.gcp.with.max_new_tokens=24",
    "stages.round.stages.gcp.with.max_steps=3",
    "stages.round.stages.probe.with.max_new_tokens=24",
    "stages.round.stages.probe.with.max_steps=3",
    "stages.round.stages.fresh.with.n=3",
    "stages.static_teacher.with.n=1",
    f"stages.static_train.with.sft={TINY_SFT}",
    "stages.static_probe.with.max_new_tokens=24",
    "stages.static_probe.with.max_steps=3",
    "stages.bfcl.with.limit=2",
    "stages.bfcl.with.max_new_tokens=16",
]


def check_report(run: Path, iterations: int) -> dict:
    report = json.loads((run / "report.json").read_text())
    assert [it["iteration"] for it in report["iterations"]] == list(range(1, iterations + 1))
    teacher = report["iterations"][0]["teacher"]
    assert 0.0 < teacher["overall"] <= 1.0  # the simulated teacher solves most probe tasks
    for it in report["iterations"]:
        assert set(it) >= {"iteration", "student", "teacher", "counts", "next_counts"}
        assert set(it["counts"]) == set(ORIGINS)
        assert it["teacher"] == teacher  # the same probe set every iteration
        assert set(it["student"]) <= set(teacher)  # the same capabilities
        assert all(0.0 <= v <= 1.0 for v in it["student"].values())
    first = report["iterations"][0]
    assert first["counts"]["seed"] > 0 and sum(first["counts"].values()) == first["counts"]["seed"]
    for before, after in zip(report["iterations"], report["iterations"][1:], strict=False):
        assert after["counts"] == before["next_counts"]  # a round trains on what the last made
    assert isinstance(report["weak_capabilities"], list)
    static = report["static_baseline"]  # the same student on plain teacher data
    if static is not None:
        assert static["tasks"] == report["probe_tasks"]
        assert 0.0 <= static["student"]["overall"] <= 1.0
        last = report["iterations"][-1]["student"]["overall"]
        assert static["loop_minus_static"] == pytest.approx(last - static["student"]["overall"])
    # every accuracy with its interval; JGLV measured against the injected wrong labels
    for it in report["iterations"]:
        assert set(it["student_ci"]) == set(it["student"])
        for c, (lo, hi) in it["student_ci"].items():
            assert lo is None or lo <= it["student"][c] <= hi
    noise = report["label_noise"]
    assert noise["seed_noisy"] > 0 and 0 < noise["rate"] <= 1
    for it in noise["iterations"]:
        assert it["found"] + it["false_alarms"] == it["relabelled"]
        assert it["judged_noisy"] <= it["probed_noisy"] <= it["probed"]
    final = report["final_dataset"]
    assert final["rows"] == len(read_records(run / "final"))
    assert sum(final["difficulty"].values()) == final["rows"]
    text = (run / "report.md").read_text()
    assert text.startswith("# LoopTool report")
    # the last student's BFCL figures (the needed eval_bfcl stage) end the report
    bfcl = report["bfcl"]
    assert bfcl == {"stage": "bfcl", **json.loads((run / "bfcl.json").read_text())}
    last = f"round{iterations}.train"
    assert set(bfcl[last]) == {"simple_python", "irrelevance"} and bfcl["limit"] == 2
    assert all(0.0 <= v <= 1.0 for v in bfcl[last].values())
    assert f"| {last} | " in text[text.index("## BFCL") :]
    return report


def with_hardgen(path: Path) -> Path:
    """``pipelines/looptool.yaml`` with the HardGen stage its comment describes switched on
    (every tool the student and the teacher were probed on counts as a failure API, so that
    the small run makes hard samples)."""
    spec = yaml.safe_load(PIPELINE.read_text())
    loop = next(s for s in spec["stages"] if "loop" in s)
    names = [s["id"] for s in loop["stages"]]
    hardgen = {
        "id": "hardgen",
        "uses": "hardgen",
        "from": "fresh",
        "needs": ["train"],
        "with": {"checkpoint_role": "student", "probe_roles": ["student", "teacher"],
                 "tasks": 3, "min_failure_rate": 0.0, "checkpoint_max_tokens": 24},
    }  # fmt: skip
    loop["stages"].insert(names.index("next"), hardgen)
    loop["stages"][names.index("next") + 1]["from"].append("hardgen")
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


@pytest.mark.slow
def test_looptool_pipeline_small(tmp_path: Path) -> None:
    """Two rounds, with ECHO (in the pipeline) and HardGen (switched on here) between them."""
    pipe = load_pipeline(with_hardgen(tmp_path / "looptool.yaml"), SMALL)
    run = tmp_path / "run"
    result = run_pipeline(pipe, out=run)
    assert "round2.train" in result.executed and "report" in result.executed
    assert {"round1.echo", "round1.hardgen", "round2.hardgen"} <= set(result.executed)
    report = check_report(run, 2)
    # the loop's data: round 1's next dataset mixes origins and is stamped with its round
    made = read_records(run / "round1.next")
    origins = {r.extra["looptool"]["origin"] for r in made}
    assert {"seed", "hard"} <= origins <= set(ORIGINS)
    assert sum(report["iterations"][0]["next_counts"].values()) == len(made)
    for row in made:
        if row.method == "edde":  # expanded samples were executed and keep their parent
            assert row.extra["original_sample"]["id"] in row.parent_ids
            assert any(m.role == "tool" for m in row.messages)
        if row.method == "hardgen":  # verified hard samples, aimed at probed failures
            assert row.success and row.extra["hardgen"]["target"]
        if row.method == "echo":  # hindsight rewrites of the student's failed episodes
            assert row.success and row.parent_ids
    # HardGen's student probe was the checkpoint round 1 trained
    manifest = json.loads((run / "manifest.json").read_text())
    counters = manifest["stages"]["round1.hardgen"]["metrics"]["counters"]
    assert counters["llm.student.requests"] > 0
    # warm start: round 2 trains from round 1's checkpoint
    state = json.loads((run / "artifacts" / "round2.train" / "trajsynth_sft.json").read_text())
    assert state["config"]["model"].endswith("round1.train")
    # the final dataset and the plot
    assert read_records(run / "final")
    if _has("matplotlib"):
        assert (run / "report.png").stat().st_size > 0


def with_grpo(path: Path) -> Path:
    """``pipelines/looptool.yaml`` configured as its comment says for LoopTool's own trainer:
    an SFT warm-up before the loop, and GRPO (binary exact-match reward) in every round,
    warm-started from the last checkpoint."""
    spec = yaml.safe_load(PIPELINE.read_text())
    stages = spec["stages"]
    at = next(i for i, s in enumerate(stages) if "loop" in s)
    loop = stages[at]
    train = next(s for s in loop["stages"] if s["id"] == "train")
    stages.insert(at, {"id": "warmup", "uses": "train_sft", "from": "seed_split",
                       "with": {k: v for k, v in train["with"].items() if k == "sft"}})  # fmt: skip
    loop["carry"]["model"]["init"] = "warmup"
    train["uses"] = "train_grpo"
    train["with"] = {"grpo": {"iterations": 2, "tasks_per_step": 4, "group_size": 2,
                              "rollout": {"max_steps": 3, "max_new_tokens": 24}}}  # fmt: skip
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


@pytest.mark.slow
def test_looptool_pipeline_with_grpo_rounds(tmp_path: Path) -> None:
    """The loop trains with GRPO when configured: round 1 starts from the SFT warm-up, round
    2 from round 1's GRPO checkpoint; GCP probes each."""
    small = [o.replace("stages.round.stages.train.with.", "stages.warmup.with.") for o in SMALL]
    small = [o for o in small if "warm_epochs" not in o]
    pipe = load_pipeline(with_grpo(tmp_path / "looptool.yaml"), small)
    run = tmp_path / "run"
    result = run_pipeline(pipe, out=run)
    assert {"warmup", "round1.train", "round2.train", "report"} <= set(result.executed)
    manifest = json.loads((run / "manifest.json").read_text())
    for k in (1, 2):
        assert manifest["stages"][f"round{k}.train"]["metrics"]["values"]["iterations"] == 2
    state = json.loads((run / "artifacts" / "round2.train" / "trajsynth_grpo.json").read_text())
    assert state["config"]["model"].endswith("round1.train")
    state = json.loads((run / "artifacts" / "round1.train" / "trajsynth_grpo.json").read_text())
    assert state["config"]["model"].endswith("warmup")
    check_report(run, 2)


def _has(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


# --------------------------------------------------------------------------------------
# against an OpenAI-compatible endpoint
# --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_looptool_pipeline_against_served_simulator(tmp_path: Path) -> None:
    reset_clients()
    try:
        with spawn_server("--backend", "sim") as server:
            base_url = server.base_url
            llm = [
                "defaults.llm.*.backend=openai",
                f"defaults.llm.*.base_url={base_url}",
                "defaults.llm.*.model=sim",
                "defaults.llm.*.api_key=none",
                "defaults.llm.*.send_metadata=true",
            ]
            # one round: the baseline matches the seed data the round trained on
            one = ["stages.round.iterations=1", "stages.static_data.with.after_round=0"]
            overrides = [*SMALL, *one, *llm]
            result = run_pipeline(load_pipeline(PIPELINE, overrides), out=tmp_path)
            assert "report" in result.executed
            check_report(tmp_path, 1)
            seen = server.metrics()
            assert seen["chat_requests"] > 0
            # every LLM stage sent its requests over HTTP (the client counts them per role)
            manifest = json.loads((tmp_path / "manifest.json").read_text())
            counters = [
                (st.get("metrics") or {}).get("counters", {}) for st in manifest["stages"].values()
            ]
            http = {
                k.split(".")[1]
                for c in counters
                for k, n in c.items()
                if k.endswith(".http_requests") and n > 0
            }
            assert {"query_writer", "teacher"} <= http, http
            roles = ("query_writer", "teacher", "judge", "expander")

            def total(what: str) -> int:
                return sum(c.get(f"llm.{r}.{what}", 0) for c in counters for r in roles)

            # a hedged duplicate or a timed-out attempt may be cancelled before the server
            # reads it (a loaded machine hedges), so only the rest must have arrived
            sure = total("http_requests") - total("hedges") - total("timeouts")
            assert 0 < sure <= seen["chat_requests"], (sure, seen["chat_requests"])
    finally:
        reset_clients()
