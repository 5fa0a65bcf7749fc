"""An API key never reaches run folders, caches or the console: passed on the command line
to a working endpoint, through the environment to one that answers 401, and in the pipeline
YAML to one that is unreachable (``bench/reliability.py`` runs all nine combinations)."""

from __future__ import annotations

from pathlib import Path

import pytest
from runkit import secret_trials

from trajsynth.llm.server import spawn_server


@pytest.mark.slow
def test_api_keys_never_leak(tmp_path: Path) -> None:
    with spawn_server("--backend", "sim") as server:
        report = secret_trials(
            tmp_path, server.base_url, cases=("flag-ok", "env-401", "yaml-unreachable")
        )
    by_case = {r["case"]: r for r in report["results"]}
    assert set(by_case) == {"flag-ok", "env-401", "yaml-unreachable"}
    assert by_case["flag-ok"]["rc"] == 0, by_case["flag-ok"]["tail"]
    assert by_case["env-401"]["rc"] != 0 and "401" in by_case["env-401"]["tail"]
    assert by_case["yaml-unreachable"]["rc"] != 0
    assert report["leaks"] == 0, [(r["case"], r["leaks"]) for r in report["results"]]
