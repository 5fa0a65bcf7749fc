"""The stage registry: names to classes, discovery of the built-in and plugin stages.

The built-in stages live in one subpackage per kind (``methods``, ``looptool``, ``quality``,
``training``, ``plumbing``; the machinery — ``context``, ``kinds``, ``registry`` — and the
shared helpers in ``common`` are not stages): every module of a kind subpackage defines
stages, and :func:`load_builtin_stages` finds them with :mod:`pkgutil` on first
lookup (so ``trajsynth --help`` stays fast and torch stays out of processes that never train),
then loads the ``trajsynth.stages`` entry points of installed plugins. A module that does not
import is an error naming the module and the exception, never a silently missing stage.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa
from pydantic import ValidationError

from ..core.config import identity_dump
from ..core.errors import BackendError, ConfigError, UnknownStageError
from ..core.ids import stable_hash
from .context import Context
from .kinds import GlobalStage, MapStage, Output, SourceStage, Stage, StageConfig

__all__ = [
    "STAGES",
    "StageImportError",
    "build_stage",
    "config_hash",
    "get_stage",
    "load_builtin_stages",
    "register",
    "stage",
    "stage_modules",
]

#: modules of this package that hold the machinery, not stages
MACHINERY = frozenset({"context", "kinds", "registry"})
#: the subpackage of helpers several stages share (no stages in it)
COMMON = "common"
#: entry-point group of third-party stage plugins
ENTRY_POINT_GROUP = "trajsynth.stages"

STAGES: dict[str, type[Stage[Any]]] = {}
_loaded = False


class StageImportError(BackendError):
    """A module that defines stages (built-in or plugin) raised when imported."""


def register(cls: type[Stage[Any]]) -> type[Stage[Any]]:
    """Class decorator: make ``cls`` available as ``uses: cls.name``."""
    if not cls.name:
        raise TypeError(f"{cls.__name__} has no `name`")
    if cls.name in STAGES and STAGES[cls.name] is not cls:
        existing = STAGES[cls.name]
        if (
            f"{existing.__module__}.{existing.__qualname__}"
            != f"{cls.__module__}.{cls.__qualname__}"
        ):
            raise TypeError(f"stage name {cls.name!r} already registered by {existing!r}")
    STAGES[cls.name] = cls
    return cls


def stage_modules(package: str = __package__) -> list[str]:
    """The stage modules of ``package``: its plain modules (not the machinery, not
    ``_private``) and those of its subpackages other than ``common`` (the kinds), in name
    order."""
    pkg = importlib.import_module(package)
    found: list[str] = []
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if info.name.startswith("_") or info.name in MACHINERY or info.name == COMMON:
            continue
        if info.ispkg:
            found += stage_modules(f"{package}.{info.name}")
        else:
            found.append(f"{package}.{info.name}")
    return found


def import_stage_module(module: str) -> None:
    """Import ``module``; any exception becomes a :class:`StageImportError` naming both."""
    try:
        importlib.import_module(module)
    except Exception as exc:
        raise StageImportError(
            f"stage module {module!r} failed to import: {type(exc).__name__}: {exc}",
            hint="its stages are unavailable until this is fixed",
        ) from exc


def load_builtin_stages(extra_modules: Iterable[str] = ()) -> dict[str, type[Stage[Any]]]:
    """Import every built-in stage module and plugin entry point (once), plus
    ``extra_modules`` (a pipeline's ``plugins:``)."""
    global _loaded
    if not _loaded:
        for mod in stage_modules():
            import_stage_module(mod)
        from importlib.metadata import entry_points

        for ep in entry_points(group=ENTRY_POINT_GROUP):
            try:
                ep.load()
            except Exception as exc:
                raise StageImportError(
                    f"stage plugin {ep.name!r} ({ep.value}) failed to import: "
                    f"{type(exc).__name__}: {exc}",
                    hint=f"fix or uninstall the package that declares it in {ENTRY_POINT_GROUP!r}",
                ) from exc
        _loaded = True
    for mod in extra_modules:
        try:
            importlib.import_module(mod)
        except ImportError as exc:
            raise ConfigError(f"plugin module {mod!r} cannot be imported: {exc}") from exc
    return STAGES


def get_stage(name: str) -> type[Stage[Any]]:
    """The stage class registered as ``name``; UnknownStageError with suggestions otherwise."""
    load_builtin_stages()
    try:
        return STAGES[name]
    except KeyError:
        close = difflib.get_close_matches(name, STAGES, n=3)
        hint = (
            f"did you mean {' or '.join(repr(c) for c in close)}?"
            if close
            else "run `trajsynth stages` for the list"
        )
        raise UnknownStageError(f"unknown stage {name!r}", hint=hint) from None


def build_stage(
    name: str, config: dict[str, Any] | StageConfig | None = None, *, where: str = ""
) -> Stage[Any]:
    """Instantiate stage ``name`` with ``config`` validated against its Config model."""
    cls = get_stage(name)
    if isinstance(config, StageConfig):
        return cls(config)
    try:
        cfg = cls.Config.model_validate(config or {})
    except ValidationError as exc:
        raise ConfigError(
            _format_validation(exc, prefix=where or f"stage {name!r}: with")
        ) from None
    return cls(cfg)


def _format_validation(exc: ValidationError, *, prefix: str) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"])
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        parts.append(f"{prefix}.{loc}: {msg}" if loc else f"{prefix}: {msg}")
    return "; ".join(parts)


def config_hash(name: str, config: StageConfig) -> str:
    """The hash that names a stage's rows (``ctx.config_hash``): its config less the options
    at their :class:`~trajsynth.core.AsBefore` value, so adding an option redraws nothing.
    The runner's cache key hashes the whole config."""
    return stable_hash({"uses": name, "with": identity_dump(config)})


def stage(
    name: str,
    *,
    kind: str = "map",
    config: type[StageConfig] = StageConfig,
    reads: Sequence[str] = (),
    writes: Sequence[str] = (),
    outputs: Sequence[str] = ("main",),
) -> Callable[[Callable[..., Iterator[Output]]], type[Stage[Any]]]:
    """Turn a generator function into a registered stage class.

    ``fn(batches, ctx, config)`` for map/global stages, ``fn(ctx, config, offset)`` for
    sources. Example::

        @stage("max_calls", config=MaxCallsConfig, reads=("messages",))
        def max_calls(batches, ctx, config):
            for b in batches:
                yield b.filter(pc.less_equal(b["num_tool_calls"], config.max_calls))
    """
    base = {"map": MapStage, "global": GlobalStage, "source": SourceStage}[kind]

    def wrap(fn: Callable[..., Iterator[Output]]) -> type[Stage[Any]]:
        if kind == "source":

            def generate(self: Stage[Any], ctx: Context, offset: int = 0) -> Iterator[Output]:
                return fn(ctx, self.config, offset)

            body: dict[str, Any] = {"generate": generate}
        else:

            def process(
                self: Stage[Any], batches: Iterator[pa.RecordBatch], ctx: Context
            ) -> Iterator[Output]:
                return fn(batches, ctx, self.config)

            body = {"process": process}
        cls = type(
            fn.__name__,
            (base,),
            {
                "__doc__": fn.__doc__,
                "__module__": fn.__module__,
                "name": name,
                "Config": config,
                "reads": tuple(reads),
                "writes": tuple(writes),
                "outputs": tuple(outputs),
                **body,
            },
        )
        return register(cls)

    return wrap
