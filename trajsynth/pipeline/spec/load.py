"""Pipeline files: a path or a built-in pipeline's name, read as YAML and resolved."""

from __future__ import annotations

from pathlib import Path

import yaml

from ...core.errors import ConfigError
from .graph import ResolvedPipeline
from .resolve import resolve_pipeline


def builtin_pipelines() -> dict[str, Path]:
    """The pipelines shipped in the package (``pipelines/`` in the repository), by name."""
    folder = Path(__file__).resolve().parents[2] / "assets" / "pipelines"
    return {p.stem: p for p in sorted(folder.glob("*.yaml"))}


def load_pipeline(
    path: str | Path, overrides: list[str] | None = None, *, output: str | None = None
) -> ResolvedPipeline:
    """Read, override and validate a pipeline file. Raises ConfigError on any problem.

    ``path`` may also name a built-in pipeline (``tiny``, ``looptool``, ...), so an installed
    trajsynth runs them from any folder.
    """
    path = Path(path)
    if not path.exists():
        builtin = builtin_pipelines()
        if str(path) not in builtin:
            raise ConfigError(
                f"{path}: no such pipeline file",
                hint=f"built-in pipelines: {', '.join(builtin) or 'none'}",
            )
        path = builtin[str(path)]
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{path}: invalid YAML{where}: {problem}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a pipeline file is a mapping with `name` and `stages`")
    return resolve_pipeline(raw, path=path, overrides=overrides, output=output)
