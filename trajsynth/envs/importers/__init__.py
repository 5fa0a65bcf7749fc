"""Importers of tool specifications written by others, one module per format.

Each importer is ``import_<format>(src) -> Toolset``: the toolset holds every spec that
converted (checked to be OpenAI-legal and valid JSON Schema), ``failures`` lists each spec that
could not be converted with its reason, and ``duplicates`` each spec dropped because another
definition of its name came first. An importer never raises for one bad spec; it raises a
:class:`~trajsynth.core.errors.UserError` only when the source as a whole cannot be read.

| format | module | input |
|---|---|---|
| openai | :mod:`.openai` | OpenAI ``tools`` JSON / JSONL |
| bfcl | :mod:`.bfcl` | BFCL v4 question or func-doc files |
| tau | :mod:`.tau` | tau-bench ``tools_openai.json`` |
| toolalpaca | :mod:`.toolalpaca` | ToolAlpaca records with OpenAPI documentation |
| stabletoolbench | :mod:`.stabletoolbench` | ToolBench/StableToolBench ``api_list`` queries |
| apibank | :mod:`.apibank` | API-Bank level-1 test file / dialogues |

:func:`~.detect.detect_format` tells the format of a file or folder when only one fits.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ...core.errors import ConfigError
from ..spec import Toolset
from .apibank import import_apibank
from .bfcl import import_bfcl
from .detect import detect_format
from .openai import import_openai
from .stabletoolbench import import_stabletoolbench
from .tau import import_tau
from .toolalpaca import import_toolalpaca

__all__ = ["FORMATS", "IMPORTERS", "detect_format", "import_tools"]

IMPORTERS: dict[str, Callable[[str | Path], Toolset]] = {
    "openai": import_openai,
    "bfcl": import_bfcl,
    "tau": import_tau,
    "toolalpaca": import_toolalpaca,
    "stabletoolbench": import_stabletoolbench,
    "apibank": import_apibank,
}
FORMATS = tuple(IMPORTERS)


def import_tools(src: str | Path, format: str) -> Toolset:
    """Import ``src`` written in ``format`` (one of :data:`FORMATS`)."""
    try:
        importer = IMPORTERS[format]
    except KeyError:
        raise ConfigError(
            f"unknown tool format {format!r}", hint=f"use one of: {', '.join(FORMATS)}"
        ) from None
    return importer(src)
