"""The stage registry: built-in modules are found without a hand-kept list, a module that does
not import is an error naming it (never a silently missing stage), and configs are typed by the
stage's generic parameter.

Run: python -m pytest tests/stages/test_registry.py -q
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import pytest

from trajsynth.core import AsBefore, identity_dump, stable_hash
from trajsynth.stages import (
    GlobalStage,
    RowStage,
    StageConfig,
    StageImportError,
    build_stage,
    config_hash,
    get_stage,
    load_builtin_stages,
    registry,
)

STAGES_DIR = Path(registry.__file__).parent


def test_every_builtin_module_is_found_and_registers_its_stages() -> None:
    found = registry.stage_modules()
    on_disk = sorted(
        "trajsynth.stages." + ".".join(p.relative_to(STAGES_DIR).with_suffix("").parts)
        for p in STAGES_DIR.glob("*/*.py")
        if not p.stem.startswith("_") and p.parent.name != registry.COMMON
    )
    assert found == on_disk and not [
        p for p in STAGES_DIR.glob("*.py") if p.stem not in {"__init__", *registry.MACHINERY}
    ]  # the top holds the machinery only
    kinds = {m.split(".")[2] for m in found}
    assert kinds == {"methods", "looptool", "quality", "training", "plumbing"}
    assert "trajsynth.stages.methods.echo" in found and "trajsynth.stages.kinds" not in found
    stages = load_builtin_stages()
    modules = {cls.__module__ for cls in stages.values()}
    # every discovered module defines at least one stage: helpers live in stages.common
    assert set(found) <= modules


def test_no_method_module_imports_another() -> None:
    modules = set(registry.stage_modules())
    borrowed = []
    for name in sorted(modules):
        path = STAGES_DIR.joinpath(*name.split(".")[2:]).with_suffix(".py")
        package = name.rpartition(".")[0].split(".")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                module = ".".join([*base, node.module] if node.module else base)
                targets = {module} | {f"{module}.{a.name}" for a in node.names}
                borrowed += [f"{name} imports {t}" for t in sorted(targets & modules - {name})]
    assert borrowed == []


def _plant(tmp_path: Path, package: str, body: str) -> None:
    pkg = tmp_path / package
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "good.py").write_text("X = 1\n")
    (pkg / "broken.py").write_text(body)


def test_a_module_that_does_not_import_is_named_with_its_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _plant(tmp_path, "planted_stages", "import no_such_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert registry.stage_modules("planted_stages") == [
        "planted_stages.broken",
        "planted_stages.good",
    ]
    # the loader scans its package; point it at the planted one and force a fresh load
    monkeypatch.setattr(registry, "stage_modules", lambda: ["planted_stages.broken"])
    monkeypatch.setattr(registry, "_loaded", False)
    with pytest.raises(StageImportError) as err:
        get_stage("echo")
    msg = str(err.value)
    assert "'planted_stages.broken'" in msg
    assert "ModuleNotFoundError: No module named 'no_such_dependency_xyz'" in msg
    assert registry._loaded is False  # the next lookup tries again and fails again
    monkeypatch.undo()
    assert get_stage("echo").name == "echo"


def test_the_cli_reports_a_broken_plugin_in_one_line_and_exits_non_zero(tmp_path: Path) -> None:
    (tmp_path / "broken_plugin.py").write_text("raise RuntimeError('plugin is broken')\n")
    dist = tmp_path / "broken_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[trajsynth.stages]\nbroken = broken_plugin\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    res = subprocess.run(
        [sys.executable, "-m", "trajsynth", "stages"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert res.returncode == 1, res.stdout + res.stderr
    assert "stage plugin 'broken' (broken_plugin) failed to import" in res.stderr
    assert "RuntimeError: plugin is broken" in res.stderr
    assert "Traceback" not in res.stderr + res.stdout


class TypedConfig(StageConfig):
    limit: int = 3


class TypedStage(GlobalStage[TypedConfig]):
    name = "typed_stage_for_test"

    def process(self, batches, ctx):  # type: ignore[override]
        yield from ()


class InnerConfigStage(RowStage):
    name = "inner_config_stage_for_test"

    class Config(StageConfig):
        keep: bool = True


def test_the_config_class_comes_from_the_generic_parameter_or_an_inner_class() -> None:
    assert TypedStage.Config is TypedConfig
    assert TypedStage().config == TypedConfig(limit=3)
    assert TypedStage(TypedConfig(limit=5)).config.limit == 5
    assert InnerConfigStage.Config.__name__ == "Config"
    assert InnerConfigStage().config.keep is True
    # every built-in stage validates its `with:` against the class it is parameterised by
    assert type(build_stage("echo", {}).config).__name__ == "EchoConfig"
    assert type(build_stage("hardgen", {}).config).__name__ == "HardGenConfig"


class _Inner(StageConfig):
    depth: int = 2


class _Old(StageConfig):
    """A stage's config before an option was added."""

    rate: float = 0.3
    inner: _Inner = _Inner()


class _NewInner(StageConfig):
    depth: int = 2
    wide: Annotated[bool, AsBefore(False)] = False


class _New(StageConfig):
    """The same config with two options added, one of them nested."""

    rate: float = 0.3
    share: Annotated[float, AsBefore(0.0)] = 0.0
    inner: _NewInner = _NewInner()


def test_an_added_option_at_its_old_behaviour_leaves_the_row_ids_as_they_were() -> None:
    old = config_hash("s", _Old())
    assert config_hash("s", _New()) == old
    assert config_hash("s", _New(share=0)) == old  # 0 and 0.0 are one setting
    # any other setting is a new config: other ids, other draws
    assert config_hash("s", _New(share=0.5)) != old
    assert config_hash("s", _New(inner=_NewInner(wide=True))) != old
    # the options that were there before still count
    assert config_hash("s", _New(rate=0.4)) == config_hash("s", _Old(rate=0.4)) != old
    assert identity_dump(_New(share=0.5)) == {
        "rate": 0.3,
        "share": 0.5,
        "inner": {"depth": 2},
    }


def test_the_old_behaviour_value_is_compared_by_type_not_only_by_equality() -> None:
    class Flag(StageConfig):
        n: Annotated[int | bool, AsBefore(1)] = 1

    assert identity_dump(Flag()) == {}
    assert identity_dump(Flag(n=True)) == {"n": True}  # True == 1, but not the same setting


def test_magnet_tasks_bundle_share_off_hashes_as_before_it_existed() -> None:
    stage = build_stage("magnet_tasks", {})
    dump = stage.config.model_dump(mode="json")
    assert dump.pop("bundle_share") == 0.0
    assert config_hash("magnet_tasks", stage.config) == stable_hash(
        {"uses": "magnet_tasks", "with": dump}
    )
