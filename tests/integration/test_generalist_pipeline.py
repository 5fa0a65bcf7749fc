"""The generalist pipeline (every tool collection → benchmark-shaped tasks → training → BFCL):
it validates as shipped, runs end to end small (two collections read from ../shared/external,
the tiny student, two BFCL categories), no BFCL single-turn function or question reaches the
training rows, and bfcl.json reports the trained model and a contamination of 0. The
`decontaminate` stage routes a row that offers a BFCL function to its side output.

Run: python -m pytest tests/integration/test_generalist_pipeline.py -q
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from trajsynth.cli import main as cli
from trajsynth.core import GroundTruth
from trajsynth.core.errors import ConfigError
from trajsynth.core.schema import Message, Trajectory
from trajsynth.envs import EnvFactory
from trajsynth.llm.sim.phrasing import REFUSALS
from trajsynth.pipeline import run_pipeline
from trajsynth.pipeline.spec import builtin_pipelines, load_pipeline
from trajsynth.stages import Context, ContextSpec, build_stage
from trajsynth.store import read_records
from trajsynth.train.bfcl import contamination, single_turn_index


@pytest.fixture
def collections(external_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TRAJSYNTH_EXTERNAL", str(external_dir))
    return external_dir


@pytest.fixture
def imported(collections: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """What `make data/imported` writes: API-Bank's dialogues, ToolAlpaca's first decisions."""
    folder = tmp_path / "imported"
    sources = {
        "apibank": ("apibank-dialogues", "api-bank/lv1-lv2-samples/level-1-given-desc"),
        "toolalpaca": ("toolalpaca-answers", "toolalpaca/data"),
    }
    for name, (command, src) in sources.items():
        try:
            cli(["import", command, str(collections / src), "--out", str(folder / name)])
        except SystemExit as exc:
            assert not exc.code
    monkeypatch.setenv("TRAJSYNTH_IMPORTED", str(folder))
    return folder


def test_ships_and_names_its_collections_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "generalist" in builtin_pipelines()
    monkeypatch.delenv("TRAJSYNTH_EXTERNAL", raising=False)
    with pytest.raises(ConfigError, match=r"\$\{TRAJSYNTH_EXTERNAL\} is not set"):
        load_pipeline("generalist")


def test_every_collection_becomes_a_domain_without_bfcl_names(imported: Path) -> None:
    pipe = load_pipeline("generalist")
    factory = EnvFactory(pipe.spec.defaults.env)
    names = single_turn_index().names
    sizes = {d: len(factory.toolset(d)) for d in factory.domains()}
    assert sizes["stabletoolbench"] > 500 and sizes["toolalpaca"] > 50
    assert sum(sizes.values()) > 1000  # "thousands of tools": every collection at once
    for d in factory.domains():
        assert not set(factory.toolset(d).names()) & names, d
    # a domain without decontamination offers the names BFCL uses (tau retail: one)
    plain = EnvFactory({**pipe.spec.defaults.env, "decontaminate": None})
    assert set(plain.toolset("tau_retail").names()) & names


SMALL = [
    "stages.tasks.with.domains=[toolalpaca,tau_retail]",
    "stages.tasks.with.tasks_per_domain=10",
    "stages.tasks.with.tasks_per_tool=null",
    # enough declines that some outlast balance's cut of easy rows at this size
    "stages.tasks.with.irrelevant_p=0.3",
    "stages.train.with.sft.model=tiny",
    "stages.train.with.sft.max_minutes=null",
    "stages.train.with.sft.max_steps=4",
    "stages.train.with.sft.lora_r=0",
    "stages.train.with.sft.train_layers=0",  # the tiny student trains every weight
    "stages.bfcl.with.base=null",
    "stages.bfcl.with.limit=2",
    "stages.bfcl.with.categories=[simple_python,irrelevance]",
    "stages.bfcl.with.max_new_tokens=16",
]


def test_runs_end_to_end_small(imported: Path, tmp_path: Path) -> None:
    result = run_pipeline("generalist", out=tmp_path / "run", overrides=SMALL)
    tasks = read_records(result.output("tasks"))
    assert len(tasks) == 20 and {t.domain for t in tasks} == {"toolalpaca", "tau_retail"}
    caps = {c for t in tasks for c in t.capabilities}
    assert {"single_call", "no_tool_needed"} <= caps
    for t in tasks:  # every gold call is a function the row offers
        offered = {x["function"]["name"] for x in t.tools}
        assert {c.name for c in GroundTruth.from_json(t.ground_truth).flat_calls()} <= offered
    views = read_records(result.output("views"))
    natural = read_records(result.output("natural"))
    assert views and all(v.messages[-1].role == "assistant" for v in views)
    # a request no offered function fits is declined in one turn, and that row reaches the
    # training views (the filter's "too easy" rule dropped them; the teacher used to ask):
    # every such answer is a refusal
    declines = [
        v
        for v in views
        if "no_tool_needed" in v.capabilities
        and "withheld" not in v.extra.get("single_turn", {})
        and not v.messages[-1].tool_calls
    ]
    refusals = [re.escape(r).replace(re.escape("{what}"), ".+") for r in REFUSALS]
    assert declines and all(
        any(re.fullmatch(r, v.messages[-1].content or "") for r in refusals) for v in declines
    )
    assert {r.method for r in natural} == {"import:api-bank", "import:toolalpaca"}
    assert len(natural) == len(read_records(imported / "apibank")) + len(
        read_records(imported / "toolalpaca")
    )  # nothing in them names a BFCL function or question
    trained_on = views + natural
    assert contamination(trained_on, single_turn_index())["count"] == 0
    train = result.manifest.stages["train"].metrics["values"]
    assert train["rows"] == len(trained_on)
    report = json.loads((tmp_path / "run" / "bfcl.json").read_text())
    assert report["contamination"]["count"] == 0 and report["limit"] == 2
    assert set(report["trained"]) == {"simple_python", "irrelevance"}
    assert report["trained"] == report["train"]  # the last needed checkpoint
    assert all(0.0 <= v <= 1.0 for v in report["trained"].values())


def test_decontaminate_routes_rows_that_hold_bfcl_items() -> None:
    index = single_turn_index()
    bfcl_name = sorted(index.names)[0]
    question = "What is the weather like in Lisbon next Tuesday afternoon, please?"

    def row(i: int, name: str, text: str) -> Trajectory:
        tools = [{"type": "function", "function": {"name": name, "parameters": {}}}]
        msgs = [Message(role="user", content=text)]
        return Trajectory(id=f"r{i}", task_id=f"t{i}", goal=text, tools=tools, messages=msgs)

    rows = [row(0, "lookup_lisbon_weather", question), row(1, bfcl_name, question)]
    stage = build_stage("decontaminate", {})
    ctx = Context(ContextSpec(stage_id="clean", seed=0))
    from trajsynth.core.batch import to_batch

    out = list(stage.process(iter([to_batch(rows)]), ctx))
    kept = [r for o in out if not hasattr(o, "name") for r in o]
    side = [o for o in out if hasattr(o, "name")]
    assert [r.id for r in kept] == ["r0"]
    assert side[0].name == "contaminated" and [r.id for r in side[0].data] == ["r1"]
    assert ctx.metrics.snapshot()["counters"]["contaminated"] == 1
