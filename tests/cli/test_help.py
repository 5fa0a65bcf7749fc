"""``--help`` reads like a well-kept CLI's: the command list gives each command's one-line
summary unbroken (on an 80-column terminal), commands and options are grouped in panels, and
no option shows typer's ``<bool>``/``<str>`` type names: values have metavars (``PATH``,
``N``, ``FLOAT``, the choices), flags none.

Run: python -m pytest tests/cli/test_help.py -q
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from typing import Any

import pytest
import typer.main

from trajsynth.cli import app, main

#: typer's own type names, as it shows them when an option has no metavar
TYPE_NAMES = re.compile(
    r"<(bool|str|int|float|path|file|dir|text|list\[\w+\])>|<[\w-]+(\|[\w-]+)+>"
)


def _groups() -> Iterator[tuple[list[str], Any]]:
    def walk(group: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
        yield path, group
        for name, command in sorted(group.commands.items()):
            if hasattr(command, "commands"):
                yield from walk(command, [*path, name])

    return walk(typer.main.get_command(app), [])


def _all() -> Iterator[list[str]]:
    for path, group in _groups():
        yield path
        yield from ([*path, n] for n, c in group.commands.items() if not hasattr(c, "commands"))


def helptext(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--help"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def _summary(command: Any) -> str:
    """The first paragraph of the command's help, on one line."""
    first = inspect.cleandoc(command.short_help or command.help or "").split("\n\n")[0]
    return " ".join(first.split())


@pytest.mark.parametrize("columns", [80, 100])
def test_the_command_lists_show_each_summary_on_one_line(
    columns: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))
    for path, group in _groups():
        lines = helptext(capsys, path).splitlines()
        for name, command in group.commands.items():
            summary = _summary(command)
            assert len(summary) <= 64, (path, name, summary)
            row = [line for line in lines if re.match(rf"│ {re.escape(name)} +\S", line)]
            assert len(row) == 1, (path, name, lines)
            assert f" {summary} " in row[0], (path, name, row[0])
            following = lines[lines.index(row[0]) + 1]
            assert re.match(r"│ {4,}\S", following) is None, (path, name, following)


def test_the_docstrings_summaries_are_one_line() -> None:
    """The summary is the docstring's first line; details follow after a blank line."""
    for _, group in _groups():
        for name, command in group.commands.items():
            callback = getattr(command, "callback", None)
            doc = inspect.getdoc(callback) if callback is not None else None
            if doc and not hasattr(command, "commands"):
                rest = doc.partition("\n")[2]
                assert not rest or rest.startswith("\n"), (name, doc)


@pytest.mark.parametrize("path", list(_all()), ids=lambda p: " ".join(p) or "trajsynth")
def test_no_type_names_for_metavars(
    path: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    text = helptext(capsys, path)
    assert TYPE_NAMES.search(text) is None, text
    assert "Show this message and exit." in text


def test_options_are_grouped_and_carry_metavars(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    text = helptext(capsys, [])
    for panel in ("Pipelines", "Data", "Quality", "Tools and environments", "Training"):
        assert f"─ {panel} ─" in text
    text = helptext(capsys, ["filter"])
    assert "─ Rules ─" in text and "─ Thresholds ─" in text
    assert re.search(r"--min-quality +FLOAT ", text) and re.search(r"--min-turns +N ", text)
    assert re.search(r"--out +-o +PATH ", text) and re.search(r"--force +No|--force +Rerun", text)
    assert "Usage: trajsynth filter [OPTIONS] {PATH}" in text
    text = helptext(capsys, ["run"])
    assert re.search(r"--set +KEY=VALUE ", text) and "[local|ray]" in text
    assert re.search(r"--quiet +-q +No progress output", text)
