"""kill -9 of ``trajsynth run`` (the shipped echo_steca pipeline, scaled down) at two random
moments, then a resumed run: the same rows as an uninterrupted run in every stage folder, no
temporary files left, no process of the killed run alive (``bench/reliability.py`` runs 20)."""

from __future__ import annotations

from pathlib import Path

import pytest
from runkit import kill_trials


@pytest.mark.slow
def test_kill_and_resume_is_identical(tmp_path: Path) -> None:
    report = kill_trials(tmp_path, 2, seed=1)
    assert report["ok"] == 2, report["results"]
