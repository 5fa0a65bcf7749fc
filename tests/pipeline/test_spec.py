"""Pipeline validation: every problem is one ConfigError naming the stage id and the field.

Run: python -m pytest tests/pipeline/test_spec.py -q
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from trajsynth.core import ConfigError
from trajsynth.pipeline.spec import load_pipeline, resolve_pipeline


def pipe(*stages: dict, **top) -> dict:
    return {"name": "t", **top, "stages": list(stages)}


RAW = {"id": "raw", "uses": "synthetic", "with": {"rows": 10}}


def test_valid_pipeline_resolves_in_topological_order() -> None:
    p = resolve_pipeline(
        pipe(
            {"id": "b", "uses": "sample", "from": "a", "with": {"n": 2}},
            {"id": "a", "uses": "split", "from": "raw"},
            RAW,
            {"id": "c", "uses": "concat", "from": ["b", "a:eval"]},
        )
    )
    assert p.order == ["raw", "a", "b", "c"]
    assert [str(r) for r in p.stages["c"].inputs] == ["b", "a:eval"]
    assert p.sinks() == ["c"]


@pytest.mark.parametrize(
    "stage, message",
    [
        ({"id": "s", "uses": "sampel", "from": "raw"}, r"stage 's': uses: unknown stage 'sampel'"),
        (
            {"id": "s", "uses": "sample", "from": "raw", "with": {"n": 1, "nn": 2}},
            r"stage 's': with\.nn: unknown field",
        ),
        (
            {"id": "s", "uses": "sample", "from": "raw", "with": {"n": "many"}},
            r"stage 's': with\.n: Input should be a valid integer",
        ),
        (
            {"id": "s", "uses": "sample", "from": "raw", "with": {}},
            r"stage 's': with: .*exactly one of n or fraction",
        ),
        (
            {"id": "s", "uses": "sample", "from": "nowhere", "with": {"n": 1}},
            r"stage 's': from: 'nowhere' is neither a stage id nor an existing path",
        ),
        (
            {"id": "s", "uses": "sample", "from": "raw:failed", "with": {"n": 1}},
            r"stage 's': from: 'raw' has no output 'failed'",
        ),
        (
            {"id": "s", "uses": "synthetic", "from": "raw"},
            r"stage 's': from: synthetic takes exactly 0 input\(s\), got 1",
        ),
        ({"id": "s", "uses": "sample", "form": "raw"}, r"stage 's': form: unknown field"),
        ({"id": "bad id!", "uses": "sample"}, r"stage 'bad id!': id: .*letters, digits"),
    ],
)
def test_each_problem_names_the_stage_and_field(stage: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve_pipeline(pipe(RAW, stage))


def test_cycle_is_reported_with_its_path() -> None:
    with pytest.raises(ConfigError, match=r"cycle: .*(a → b → a|b → a → b)"):
        resolve_pipeline(
            pipe(
                {"id": "a", "uses": "split", "from": "b"},
                {"id": "b", "uses": "split", "from": "a"},
            )
        )


def test_duplicate_ids_and_empty_pipelines() -> None:
    with pytest.raises(ConfigError, match="stage 'raw': id used more than once"):
        resolve_pipeline(pipe(RAW, RAW))
    with pytest.raises(ConfigError, match="stages` is empty"):
        resolve_pipeline(pipe())


def test_unknown_top_level_and_defaults_fields() -> None:
    with pytest.raises(ConfigError, match="stagez: unknown field"):
        resolve_pipeline({"name": "t", "stagez": [], "stages": [RAW]})
    with pytest.raises(ConfigError, match=r"defaults\.sed: unknown field"):
        resolve_pipeline(pipe(RAW, defaults={"sed": 1}))


def test_overrides_address_stages_by_id() -> None:
    p = resolve_pipeline(
        pipe(RAW, {"id": "s", "uses": "sample", "from": "raw", "with": {"n": 2}}),
        overrides=["stages.s.with.n=7", "defaults.seed=3", "stages.raw.with.success_rate=0.25"],
    )
    assert p.stages["s"].config.n == 7
    assert p.stages["raw"].config.success_rate == 0.25
    assert p.spec.defaults.seed == 3
    with pytest.raises(ConfigError, match="no stage with id 'zz'"):
        resolve_pipeline(pipe(RAW), overrides=["stages.zz.with.n=1"])
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        resolve_pipeline(pipe(RAW), overrides=["stages.raw.with.rows"])


def test_overrides_reach_stages_inside_a_loop() -> None:
    from trajsynth.pipeline.spec import apply_overrides

    train = {"id": "train", "uses": "y", "with": {"sft": {"epochs": 8}}}
    raw = {
        "stages": [{"id": "a", "uses": "x"}, {"loop": "round", "iterations": 2, "stages": [train]}]
    }
    apply_overrides(raw, [("stages.train.with.sft.epochs", 16), ("stages.round.iterations", 3)])
    assert raw["stages"][1]["stages"][0]["with"]["sft"]["epochs"] == 16
    assert raw["stages"][1]["iterations"] == 3
    with pytest.raises(ConfigError, match=r"ids: \['a', 'round'\]"):
        apply_overrides(raw, [("stages.zz.with.n", 1)])


def test_column_wiring_is_checked_before_running() -> None:
    from pydantic import Field

    from trajsynth.stages import GlobalStage, StageConfig, register

    @register
    class NeedsQuality(GlobalStage):
        """Test stage that reads quality_score."""

        name = "test_needs_quality"
        reads = ("quality_score",)

        class Config(StageConfig):
            x: int = Field(default=0)

        def process(self, batches, ctx):
            yield from batches

    with pytest.raises(
        ConfigError,
        match=r"stage 'q': test_needs_quality reads "
        r"\['quality_score'\], which no stage upstream",
    ):
        resolve_pipeline(pipe(RAW, {"id": "q", "uses": "test_needs_quality", "from": "raw"}))


def test_yaml_syntax_errors_give_line_numbers(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("name: t\nstages:\n  - id: a\n    uses: [sample\n")
    with pytest.raises(ConfigError, match=r"invalid YAML \(line \d+, column \d+\)"):
        load_pipeline(path)


def test_paths_in_from_are_inputs(tmp_path: Path) -> None:
    (tmp_path / "only-here").mkdir()
    path = tmp_path / "p.yaml"
    path.write_text(
        yaml.safe_dump(pipe({"id": "s", "uses": "sample", "from": "only-here", "with": {"n": 1}}))
    )
    p = load_pipeline(path)  # not under the working folder: relative to the pipeline file
    assert p.stages["s"].inputs[0].path == tmp_path / "only-here"


def test_committed_pipeline_schema_matches_generated() -> None:
    import json

    from trajsynth.pipeline.spec import pipeline_json_schema

    repo = Path(__file__).resolve().parents[2]
    committed = json.loads((repo / "schemas" / "pipeline.schema.json").read_text())
    assert committed == pipeline_json_schema(), (
        "schemas/pipeline.schema.json is stale: run `trajsynth schema --write`"
    )
