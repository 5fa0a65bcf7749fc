"""The layer rules of docs/architecture.md, enforced on every module's imports.

The two tables marked "(checked)" in docs/architecture.md are the rules: the layer table
(a module imports lower ranks only, never its own rank's other layers) and the stages table
(which modules of ``trajsynth/stages`` are machinery and common helpers; every other one is
a method module, and no method module imports another). Imports are read with ``ast`` —
absolute and relative, at module level, inside functions and under ``TYPE_CHECKING`` alike.

Run: python -m pytest tests/test_layers.py -q
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = REPO_ROOT / "docs" / "architecture.md"
PACKAGE = "trajsynth"


@dataclass(frozen=True)
class Rules:
    ranks: dict[str, int]  # layer (subpackage or module of the package, or __init__) → rank
    machinery: frozenset[str]  # top-level names under <package>.stages
    common: frozenset[str]
    excepted: dict[str, frozenset[str]] = field(default_factory=dict)  # lower layers barred
    kinds: frozenset[str] = frozenset()  # subpackages of <package>.stages: one stage a module


@dataclass(frozen=True)
class Import:
    importer: str  # dotted module name
    imported: str  # dotted module name (the submodule when ``from pkg import submodule``)
    path: Path
    line: int


def _section(text: str, heading: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"## {heading}"))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), None)
    return lines[start + 1 : end]


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def parse_rules(text: str) -> Rules:
    """The layer table and the stages table of docs/architecture.md."""
    ranks: dict[str, int] = {}
    excepted: dict[str, frozenset[str]] = {}
    for line in _section(text, "Layers"):
        cells = _cells(line) if line.startswith("|") else []
        if cells and cells[0].isdigit():
            _, _, barred = cells[3].partition(" except ")
            for name in re.findall(r"`([\w.]+)`", cells[1]):
                ranks[name] = int(cells[0])
                excepted[name] = frozenset(re.findall(r"`([\w.]+)`", barred))
    parts: dict[str, frozenset[str]] = {}
    for line in _section(text, "Stages"):
        cells = _cells(line) if line.startswith("|") else []
        if len(cells) > 1:
            parts[cells[0]] = frozenset(re.findall(r"`([\w.]+)`", cells[1]))
    assert ranks, "docs/architecture.md: no rows in the table under '## Layers'"
    assert parts.get("machinery"), "docs/architecture.md: no 'machinery' row under '## Stages'"
    assert parts.get("common helpers"), "docs/architecture.md: no 'common helpers' row"
    kinds = parts.get("kinds", frozenset())
    return Rules(ranks, parts["machinery"], parts["common helpers"], excepted, kinds)


def _module_name(path: Path, root: Path) -> tuple[str, bool]:
    parts = path.relative_to(root.parent).with_suffix("").parts
    is_package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_package else parts), is_package


def iter_imports(root: Path) -> Iterator[Import]:
    """Every import of a module of the package at ``root`` that names that package."""
    package = root.name
    modules = {_module_name(p, root)[0] for p in root.rglob("*.py")}
    for path in sorted(root.rglob("*.py")):
        name, is_package = _module_name(path, root)
        here = name if is_package else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                    module = ".".join([*base, node.module] if node.module else base)
                else:
                    module = node.module or ""
                for alias in node.names:  # ``from pkg import submodule`` imports the submodule
                    sub = f"{module}.{alias.name}"
                    targets.append(sub if sub in modules else module)
            for target in dict.fromkeys(targets):
                if target == package or target.startswith(package + "."):
                    yield Import(name, target, path, node.lineno)


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _stage_unit(module: str, package: str, kinds: frozenset[str] = frozenset()) -> str | None:
    """The unit under ``<package>.stages``: in a kind subpackage the kind and its module
    (``methods.echo``), else the top-level name (a module or subpackage); None outside."""
    prefix = f"{package}.stages"
    if module == prefix:
        return "__init__"
    if module.startswith(prefix + "."):
        parts = module[len(prefix) + 1 :].split(".")
        return ".".join(parts[:2]) if parts[0] in kinds and len(parts) > 1 else parts[0]
    return None


def check(root: Path, rules: Rules, allowed: Iterable[tuple[str, str]] = ()) -> list[str]:
    """The imports in the package at ``root`` that break ``rules``, one line each."""
    package = root.name
    allowed = set(allowed)
    helpers = rules.machinery | rules.common
    problems: list[str] = []
    for imp in iter_imports(root):
        where = f"{imp.path.relative_to(root.parent)}:{imp.line}: {imp.importer} imports"
        src, dst = _layer(imp.importer), _layer(imp.imported)
        if src not in rules.ranks or dst not in rules.ranks:
            missing = src if src not in rules.ranks else dst
            problems.append(f"{where} {imp.imported}: layer {missing!r} is not in the table")
            continue
        if src != dst and rules.ranks[dst] >= rules.ranks[src]:
            way = "up" if rules.ranks[dst] > rules.ranks[src] else "sideways"
            problems.append(
                f"{where} {imp.imported}: {way} from {src} (rank {rules.ranks[src]}) "
                f"to {dst} (rank {rules.ranks[dst]})"
            )
            continue
        if dst in rules.excepted.get(src, ()):
            problems.append(f"{where} {imp.imported}: layer {src} may not import {dst}")
            continue
        a = _stage_unit(imp.importer, package, rules.kinds)
        b = _stage_unit(imp.imported, package, rules.kinds)
        if a is None or b is None or a == b or b in helpers:
            continue
        if (imp.importer, imp.imported) in allowed:
            continue
        if a in rules.machinery:
            problems.append(f"{where} {imp.imported}: stage machinery imports a method module")
        elif a in rules.common:
            problems.append(f"{where} {imp.imported}: a common helper imports a method module")
        else:
            problems.append(f"{where} {imp.imported}: a method module imports another one")
    return problems


def _rules() -> Rules:
    return parse_rules(ARCHITECTURE.read_text(encoding="utf-8"))


def test_the_package_keeps_the_layer_rules() -> None:
    problems = check(REPO_ROOT / PACKAGE, _rules())
    assert not problems, "imports that break docs/architecture.md:\n" + "\n".join(problems)


def test_every_layer_of_the_package_is_in_the_table() -> None:
    root = REPO_ROOT / PACKAGE
    layers = {p.stem for p in root.glob("*.py")} | {
        p.parent.name for p in root.glob("*/__init__.py")
    }
    assert layers - set(_rules().ranks) == set()


def _plant(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / "trajsynth" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "trajsynth"


CLEAN = {
    "__init__.py": "from .core import Row\nfrom .pipeline import run\n",
    "__main__.py": "from trajsynth.cli import main\n",
    "version.py": "VERSION = '1'\n",
    "core/__init__.py": "from .schema import Row\n",
    "core/schema.py": "class Row: ...\n",
    "envs/__init__.py": "",
    "envs/spec.py": "from ..core.schema import Row\n",
    "graph/__init__.py": "from trajsynth.envs import spec\n",
    "cli/__init__.py": "def main():\n    from ..pipeline import run\n",
    "pipeline/__init__.py": "from ..stages import registry\nfrom .. import version\nrun = 1\n",
    "stages/__init__.py": "from .context import Context\n",
    "stages/context.py": "from ..core.schema import Row\nclass Context: ...\n",
    "stages/registry.py": "from . import context\n",
    "stages/common/__init__.py": "from .rows import episode_row\n",
    "stages/common/rows.py": "from ..context import Context\ndef episode_row(): ...\n",
    "stages/echo.py": "from .common import episode_row\nfrom .context import Context\n",
    "stages/steca/__init__.py": "from .calibrate import step\n",
    "stages/steca/calibrate.py": "from ..common.rows import episode_row\nstep = 1\n",
}


def test_a_clean_planted_package_passes(tmp_path: Path) -> None:
    root = _plant(tmp_path, CLEAN)
    assert len(list(iter_imports(root))) == 18
    assert check(root, parse_rules(ARCHITECTURE.read_text(encoding="utf-8"))) == []


def test_a_planted_upward_import_fails(tmp_path: Path) -> None:
    root = _plant(
        tmp_path,
        {
            **CLEAN,
            # inside a function, absolute
            "core/schema.py": "class Row: ...\ndef f():\n    from trajsynth.cli import x\n",
            # relative, three levels up, under TYPE_CHECKING
            "core/sub/__init__.py": "",
            "core/sub/m.py": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from ...stages import context\n",
            # sideways: envs and llm share rank 1
            "envs/spec.py": "import trajsynth.llm.client\n",
            "llm/__init__.py": "",
            "llm/client.py": "",
            # down, but barred: a stage never opens files
            "stages/echo.py": "from .common import episode_row\nfrom ..store import shards\n",
            "store/__init__.py": "",
            "store/shards.py": "",
        },
    )
    problems = check(root, parse_rules(ARCHITECTURE.read_text(encoding="utf-8")))
    assert len(problems) == 4, problems
    assert problems[0].startswith("trajsynth/core/schema.py:3: trajsynth.core.schema imports")
    assert "trajsynth.cli: up from core (rank 0) to cli (rank 6)" in problems[0]
    assert "core/sub/m.py:3" in problems[1] and "trajsynth.stages.context: up" in problems[1]
    assert "trajsynth.llm.client: sideways from envs (rank 1) to llm (rank 1)" in problems[2]
    assert problems[3] == (
        "trajsynth/stages/echo.py:2: trajsynth.stages.echo imports trajsynth.store.shards: "
        "layer stages may not import store"
    )


def test_a_planted_method_to_method_import_fails(tmp_path: Path) -> None:
    root = _plant(
        tmp_path,
        {
            **CLEAN,
            "stages/steca/calibrate.py": "step = 1\ndef f():\n    from ..echo import x\n",
            "stages/common/rows.py": "from trajsynth.stages import echo\n",
            "stages/registry.py": "from .steca import step\n",
            "stages/hardgen.py": "from . import echo as e\n",
        },
    )
    rules = parse_rules(ARCHITECTURE.read_text(encoding="utf-8"))
    problems = check(root, rules)
    assert [p.split(": ", 1)[0] for p in problems] == [
        "trajsynth/stages/common/rows.py:1",
        "trajsynth/stages/hardgen.py:1",
        "trajsynth/stages/registry.py:1",
        "trajsynth/stages/steca/calibrate.py:3",
    ]
    assert problems[0].endswith("trajsynth.stages.echo: a common helper imports a method module")
    assert problems[1].endswith("trajsynth.stages.echo: a method module imports another one")
    assert problems[2].endswith("trajsynth.stages.steca: stage machinery imports a method module")
    assert problems[3].endswith("trajsynth.stages.echo: a method module imports another one")
    allowed = {("trajsynth.stages.hardgen", "trajsynth.stages.echo")}
    assert len(check(root, rules, allowed)) == 3


def test_a_planted_import_between_modules_of_one_kind_fails(tmp_path: Path) -> None:
    """In a kind subpackage (``methods``) each module is a unit of its own: a sibling import
    is a method importing another, as it is across kinds."""
    root = _plant(
        tmp_path,
        {
            **CLEAN,
            "stages/methods/__init__.py": "",
            "stages/methods/echo.py": "from ..common import episode_row\n",
            "stages/methods/hardgen.py": "from .echo import x\n",
            "stages/quality/__init__.py": "",
            "stages/quality/verify.py": "from ..methods import echo\n",
        },
    )
    problems = check(root, parse_rules(ARCHITECTURE.read_text(encoding="utf-8")))
    assert [p.split(": ", 1)[0] for p in problems] == [
        "trajsynth/stages/methods/hardgen.py:1",
        "trajsynth/stages/quality/verify.py:1",
    ]
    assert all(p.endswith("a method module imports another one") for p in problems)


def test_unknown_layers_are_reported(tmp_path: Path) -> None:
    root = _plant(tmp_path, {**CLEAN, "tools/__init__.py": "from ..core import Row\n"})
    problems = check(root, parse_rules(ARCHITECTURE.read_text(encoding="utf-8")))
    assert problems == [
        "trajsynth/tools/__init__.py:1: trajsynth.tools imports trajsynth.core: "
        "layer 'tools' is not in the table"
    ]


def test_the_table_says_what_each_layer_may_import() -> None:
    """The 'may import' column agrees with the ranks (ranks below, nothing for rank 0)."""
    for line in _section(ARCHITECTURE.read_text(encoding="utf-8"), "Layers"):
        cells = _cells(line) if line.startswith("|") else []
        if not cells or not cells[0].isdigit():
            continue
        rank, may = int(cells[0]), cells[3].partition(" except ")[0]
        expected = {0: "nothing of ours", 1: "rank 0"}.get(rank, f"ranks 0-{rank - 1}")
        assert may in (expected, "every layer"), (rank, may)
