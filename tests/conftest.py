"""Shared fixtures. Run the suite with `make test` (or `python -m pytest -q`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def _external_dir() -> Path:
    env = os.environ.get("TRAJSYNTH_EXTERNAL")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "external"


@pytest.fixture(scope="session")
def external_dir() -> Path:
    """`../shared/external`: real tool-use data written by others (BFCL, tau-bench, ...).

    CI provides it; on a machine without it the tests that need it are skipped, except under
    CI=true, where its absence is an error (a silently skipped test proves nothing).
    """
    path = _external_dir()
    if not path.is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"{path} is missing; CI must provide ../shared/external")
        pytest.skip(f"{path} not present")
    return path


@pytest.fixture()
def run_dir(tmp_path: Path) -> Path:
    """An empty run folder."""
    d = tmp_path / "run"
    d.mkdir()
    return d
