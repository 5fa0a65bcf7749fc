"""``validate`` checks every config block before anything runs, ``defaults.llm.<role>`` and
``defaults.env`` included.

Run: PYTHONPATH=. python -m pytest tests/reliability/test_validate_defaults.py -q
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from trajsynth.core.errors import ConfigError
from trajsynth.pipeline.spec import builtin_pipelines, load_pipeline

TINY = "tiny"


@pytest.mark.parametrize(
    "override, needle",
    [
        ("defaults.llm.teacher.max_retries=abc", "defaults.llm.teacher.max_retries:"),
        ("defaults.llm.*.backend=nope", "defaults.llm.*.backend:"),
        ("defaults.llm.judge.sim.bogus=1", "defaults.llm.judge.sim.bogus: unknown field"),
        ("defaults.llm.teacher.local.batch_size=0", "defaults.llm.teacher.local.batch_size:"),
        ("defaults.llm.teacher=3", "defaults.llm.teacher"),
        ("defaults.env.max_steps=abc", "defaults.env: invalid env config at max_steps"),
        ("defaults.env.domains=[nowhere]", "defaults.env: unknown domain 'nowhere'"),
    ],
)
def test_bad_defaults_fail_at_load(override: str, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_pipeline(TINY, [override])
    assert needle in str(err.value.message)


def test_every_builtin_pipeline_still_validates(
    external_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # generalist.yaml reads the tool collections from ${TRAJSYNTH_EXTERNAL}, which a user sets,
    # and the rows `make data/imported` writes from ${TRAJSYNTH_IMPORTED}
    monkeypatch.setenv("TRAJSYNTH_EXTERNAL", str(external_dir))
    for name in ("apibank", "toolalpaca"):
        (tmp_path / name).mkdir()
    monkeypatch.setenv("TRAJSYNTH_IMPORTED", str(tmp_path))
    for name in builtin_pipelines():
        load_pipeline(name)
    monkeypatch.setenv("TRAJSYNTH_IMPORTED", str(tmp_path / "not-made"))
    with pytest.raises(ConfigError) as err:
        load_pipeline("generalist")
    assert "not-made/apibank' does not exist" in err.value.message
    assert "made before the run" in str(err.value.hint)


def test_validate_command_exits_2_before_running(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "trajsynth", "validate", TINY, "--set",
         "defaults.llm.teacher.max_retries=abc"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 2
    assert "defaults.llm.teacher.max_retries" in res.stderr
    assert "Traceback" not in res.stderr + res.stdout


@pytest.mark.parametrize(
    "stage, override, needle",
    [
        ("train_sft", "sft.max_minutes=abc", "with.sft.max_minutes:"),
        ("train_sft", "sft.bogus=1", "with.sft.bogus:"),
        ("train_grpo", "grpo.iterations=0", "with.grpo.iterations:"),
    ],
)
def test_training_settings_fail_at_load_not_when_the_stage_starts(
    tmp_path: Path, stage: str, override: str, needle: str
) -> None:
    """A training stage's settings (``with: {sft: ...}`` / ``{grpo: ...}``) are the trainer's
    own config as a mapping; a mistake in them fails validation, naming the stage and field,
    instead of after every stage before the training ran."""
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(
        "name: p\nstages:\n"
        "  - {id: raw, uses: synthetic, with: {rows: 10}}\n"
        f"  - {{id: train, uses: {stage}, from: raw}}\n"
    )
    load_pipeline(str(pipeline))  # the defaults validate
    with pytest.raises(ConfigError) as err:
        load_pipeline(str(pipeline), [f"stages.train.with.{override}"])
    assert "stage 'train'" in str(err.value.message)
    assert needle in str(err.value.message)
