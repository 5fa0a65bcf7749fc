"""Every read of shard data goes through the one verified read (``store.shards._read_shard``).

Read from the source with ``ast``, like ``tests/test_layers.py`` reads imports:

- only ``trajsynth/store/shards.py`` imports ``pyarrow.parquet`` or ``pyarrow.dataset`` to read
  (``trajsynth/store/export.py`` imports ``pyarrow.parquet`` to *write* a dataset and may use
  its writers only);
- inside ``shards.py``, row data is decoded in ``_decode`` alone, and ``_decode`` is called by
  ``_read_shard`` alone, which checks the shard against its run's record first.

A new module that opens Parquet files, or a new reader in ``shards.py`` that skips the check,
fails here. Run: python -m pytest tests/store/test_one_reader.py -q
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "trajsynth"
READERS = {"pyarrow.parquet", "pyarrow.dataset"}
WRITERS_ONLY = {"store/export.py": {"ParquetWriter", "write_table"}}
#: method names that decode rows from a pyarrow ParquetFile / dataset
_DECODING = {"read", "read_row_group", "read_row_groups", "iter_batches", "to_table", "scanner"}


def _module_aliases(tree: ast.Module) -> dict[str, str]:
    """Local name → the pyarrow reading module (or one of its members) it stands for."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in READERS:
                    names[a.asname or a.name] = a.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if node.module in READERS or full in READERS:
                    names[a.asname or a.name] = full
    return names


def _uses(tree: ast.Module, aliases: dict[str, str]) -> set[str]:
    """The members of the reading modules a module touches (``pq.read_table`` → read_table)."""
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if aliases.get(node.value.id) in READERS:
                used.add(node.attr)
        elif isinstance(node, ast.Name) and node.id in aliases and aliases[node.id] not in READERS:
            used.add(aliases[node.id].rsplit(".", 1)[1])
    return used


def test_only_the_store_reads_parquet() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        tree = ast.parse(path.read_text(), filename=str(path))
        aliases = _module_aliases(tree)
        if not aliases or rel == "store/shards.py":
            continue
        allowed = WRITERS_ONLY.get(rel)
        extra = _uses(tree, aliases) - (allowed or set())
        if allowed is None or extra:
            offenders.append(f"{rel}: {sorted(extra) or sorted(aliases)}")
    assert not offenders, (
        "read shards through trajsynth.store.shards (iter_batches, iter_shard, read_table, "
        f"ShardReader), which verifies them; these modules open Parquet: {offenders}"
    )


def _owners(tree: ast.Module) -> dict[ast.AST, str]:
    """Node → the name of the innermost function around it (``<module>`` outside any)."""
    owner: dict[ast.AST, str] = {}

    def visit(node: ast.AST, fn: str) -> None:
        for child in ast.iter_child_nodes(node):
            owner[child] = fn
            inner = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else fn
            visit(child, inner)

    visit(tree, "<module>")
    return owner


def test_shard_data_is_decoded_in_one_place_behind_the_check() -> None:
    tree = ast.parse((PACKAGE / "store" / "shards.py").read_text())
    owner = _owners(tree)
    decoding = sorted(
        {
            owner.get(node, "<module>")
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _DECODING
        }
    )
    assert decoding == ["_decode"], decoding
    callers = sorted(
        owner.get(node, "<module>")
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        and node.func.id == "_decode"
    )  # fmt: skip
    assert callers == ["_read_shard"], callers
    read_shard = next(
        n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_read_shard"
    )
    checks = [
        n for n in ast.walk(read_shard)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "check_shard"
    ]  # fmt: skip
    assert checks, "_read_shard must check the shard against its record"
