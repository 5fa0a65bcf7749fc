"""What the CLI prints does not depend on the terminal's width or on how long the paths it
names are: a message stays one line (a path or a count is never broken across lines), and a
table written to a pipe, a file or a capture keeps every row whole.

Run: python -m pytest tests/cli/test_console.py -q
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

from rich.table import Table

LONG = "a-folder-whose-name-makes-every-path-below-it-long"


def _cli(*args: str, columns: int) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS=str(columns))
    return subprocess.run(
        [sys.executable, "-m", "trajsynth", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_the_import_summary_is_one_line_on_a_narrow_terminal(tmp_path: Path) -> None:
    folder = tmp_path / LONG / LONG
    folder.mkdir(parents=True)
    src = folder / "tools.json"
    src.write_text(json.dumps([{"name": "f", "parameters": {"type": "object", "required": ["a"]}}]))
    out = folder / "t.json"
    res = _cli("tools", "import", str(src), "-f", "openai", "-o", str(out), columns=60)
    assert res.returncode == 0, res.stderr
    assert f"1 tools from 1 records of {src} (openai) → {out}; 1 altered\n" in res.stdout
    # an error naming a long path is one line too
    res = _cli("stats", str(folder / "missing"), columns=40)
    assert res.returncode == 2
    assert f"error: {folder / 'missing'} does not exist" in res.stderr.splitlines()[0]


def _table() -> Table:
    table = Table(title="filter: 400 rows in, of which a good many were dropped")
    table.add_column("rule")
    table.add_column("drops when")
    table.add_row("low_quality", "quality < 0.8, a threshold set by --min-quality")
    return table


def test_a_table_keeps_its_rows_whole_when_not_on_a_terminal() -> None:
    from trajsynth.cli._common import CliConsole

    piped = CliConsole(file=io.StringIO(), width=40)
    piped.print(_table())
    text = piped.file.getvalue()  # type: ignore[attr-defined]
    assert "filter: 400 rows in, of which a good many were dropped\n" in text
    assert "│ low_quality │ quality < 0.8, a threshold set by --min-quality │" in text
    assert piped.width == 40  # the console's own width is left as it was
    piped.print("a message of more than forty columns, with a path: /tmp/" + "x" * 60)
    assert text.count("\n") + 1 == piped.file.getvalue().count("\n")  # type: ignore[attr-defined]


def test_on_a_terminal_a_table_fits_its_width() -> None:
    from trajsynth.cli._common import CliConsole

    terminal = CliConsole(file=io.StringIO(), width=40, force_terminal=True, color_system=None)
    terminal.print(_table())
    title, *rows = terminal.file.getvalue().splitlines()  # type: ignore[attr-defined]
    assert title.startswith("filter: 400 rows in")  # a line of text: the terminal folds it
    assert max(len(row) for row in rows) <= 40 and len(rows) > 5
