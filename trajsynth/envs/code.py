"""The ``code`` environment: tools implemented by Python classes (or modules) that someone
else wrote, loaded by import path, as BFCL's multi-turn API classes are (Patil et al., "The
Berkeley Function Calling Leaderboard", ICML 2025; ``GorillaFileSystem``, ``TradingBot``, ...).

Steps:

1) load: each target ``"package.module:Class"`` is imported and instantiated with no
   arguments (``"package.module"`` alone: the module's public functions, no state); its
   public methods are the tools. Specs come from the toolset file when one is given (tools
   without a method there are reported), else from the signatures and docstrings
   (:func:`spec_from_function`);
2) initial state: ``initial_state`` is ``{ClassName: config}`` (BFCL's ``initial_config``);
   a class with ``_load_scenario(config)`` (BFCL's) loads it that way (an empty config when
   the task gives none, as BFCL does), any other gets the config's keys set as attributes;
3) a call: unknown tool / malformed or schema-breaking arguments → error observations, as
   in every environment; then the method runs with a copy of the arguments: an exception
   becomes ``tool_crashed`` (a :class:`~trajsynth.envs.tools.ToolError` keeps its category),
   and a returned ``{"error": message}`` (BFCL's way of refusing) becomes an ``invalid_value``
   error observation; outputs are made JSON (unknown types as text);
4) state = the objects' attributes: ``snapshot`` deep-copies them, ``restore`` copies them
   back, ``state_hash`` hashes their canonical JSON (cached until the next call), ``diff``
   compares attributes per object (one table per class, one record per attribute).
"""

from __future__ import annotations

import copy
import importlib
import inspect
import json
import logging
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Union, get_args, get_origin, get_type_hints

from ..core.errors import ConfigError
from ..core.ids import stable_hash
from ..core.schema import ToolCall
from ..core.task import GroundTruth
from .base import Environment, EnvSnapshot, ToolResult
from .calls import error_result, read_arguments
from .spec import OPENAI_NAME, Toolset, ToolSpec
from .state import State, StateDiff, diff
from .tools import ToolError, json_schema_of

__all__ = ["CodeEnvironment", "load_target", "spec_from_function", "toolset_from_targets"]

log = logging.getLogger("trajsynth.envs")

_SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean"}


def load_target(target: str) -> tuple[str, Callable[[], Any]]:
    """Step 1: ``"pkg.mod:Class"`` → (class name, constructor); ``"pkg.mod"`` → (module name,
    a function returning the module). Raises :class:`ConfigError` with what is missing."""
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"code environment: cannot import {module_name!r} ({exc})",
            hint="install the package that provides it, or fix the import path",
        ) from exc
    if not attr:
        return module_name.rsplit(".", 1)[-1], lambda: module
    obj = getattr(module, attr, None)
    if obj is None:
        raise ConfigError(f"code environment: {module_name} has no {attr!r}")
    if not callable(obj):
        raise ConfigError(f"code environment: {target} is not a class or factory")
    return attr, obj


def _methods(obj: Any) -> dict[str, Callable[..., Any]]:
    out: dict[str, Callable[..., Any]] = {}
    for name in dir(obj):
        if name.startswith("_"):
            continue
        fn = getattr(obj, name, None)
        if isinstance(obj, types.ModuleType):
            if inspect.isfunction(fn) and fn.__module__ == obj.__name__:
                out[name] = fn
        elif inspect.ismethod(fn) or inspect.isfunction(fn):
            out[name] = fn
    return out


def _schema_of(tp: Any) -> dict[str, Any]:
    origin = get_origin(tp)
    if tp in _SIMPLE:
        return {"type": _SIMPLE[tp]}
    if origin is typing.Annotated:
        base, *extras = get_args(tp)
        schema = _schema_of(base)
        desc = next((e for e in extras if isinstance(e, str)), None)
        return {**schema, "description": desc} if desc else schema
    try:  # what the built-in tools' annotations map to (TypedDicts, nested lists)
        return json_schema_of(tp)
    except TypeError:
        pass
    if origin is typing.Literal:
        return {"enum": list(get_args(tp))}
    if origin in (Union, types.UnionType):
        members = [a for a in get_args(tp) if a is not type(None)]
        return _schema_of(members[0]) if len(members) == 1 else {}
    if tp is list or origin in (list, tuple, Sequence, typing.Sequence):
        args = get_args(tp)
        return {"type": "array", **({"items": _schema_of(args[0])} if args else {})}
    if tp is dict or origin in (dict, Mapping):
        return {"type": "object"}
    return {}


def spec_from_function(name: str, fn: Callable[..., Any]) -> ToolSpec:
    """A spec from a function's signature, type hints and docstring (parameters without a
    default are required)."""
    try:
        hints = get_type_hints(fn, include_extras=True)
    except Exception:  # unresolvable annotations: no types
        hints = {}
    props: dict[str, Any] = {}
    required = []
    for p in inspect.signature(fn).parameters.values():
        if p.name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        schema = _schema_of(hints.get(p.name, Any))
        if p.default is inspect.Parameter.empty:
            required.append(p.name)
        elif p.default is not None and isinstance(p.default, (str, int, float, bool)):
            schema["default"] = p.default
        props[p.name] = schema
    parameters: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        parameters["required"] = required
    response = None
    if hints.get("return") not in (None, type(None)):
        try:  # a typed return (a TypedDict, a list of them) is the response schema
            response = json_schema_of(hints["return"])
        except TypeError:
            response = None
    doc = inspect.getdoc(fn) or ""
    return ToolSpec(
        name=name,
        description=doc.split("\n\n")[0].replace("\n", " ").strip(),
        parameters=parameters,
        response=response,
        source=f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', name)}",
    )


def toolset_from_targets(
    targets: Sequence[str], *, name: str = "", specs: Toolset | None = None
) -> Toolset:
    """The tools of ``targets``: ``specs``' entries that have a method (in ``specs``' order),
    or every public method's generated spec."""
    methods: dict[str, Callable[..., Any]] = {}
    for target in targets:
        _, make = load_target(target)
        methods.update(_methods(make()))
    if specs is not None:
        missing = [t.name for t in specs if t.original_name() not in methods
                   and t.name not in methods]  # fmt: skip
        if missing:
            log.warning("code environment %s: no method for %s", name, ", ".join(missing))
        return Toolset(name=name, tools=[t for t in specs if t.name not in missing])
    tools = [spec_from_function(n, fn) for n, fn in sorted(methods.items()) if OPENAI_NAME.match(n)]
    return Toolset(name=name, tools=tools, format="code")


#: the address in an object's default repr ("<random.Random object at 0x55d1...>"): a state
#: holding one hashed differently in every process
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _default(obj: Any) -> Any:
    """Numbers JSON does not know (mpmath, numpy, Decimal) as floats; sets sorted; else text,
    without a memory address (BFCL's MessageAPI, TravelAPI, TradingBot and VehicleControlAPI
    hold a ``random.Random``: with its address in the text their state hash, and so every
    task's ``final_state_hash``, differed from one process to the next)."""
    if hasattr(obj, "__float__") and not isinstance(obj, (str, bytes)):
        try:
            return float(obj)
        except (TypeError, ValueError):
            pass
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=repr)
    if hasattr(obj, "tolist"):
        return obj.tolist()
    return _ADDRESS.sub("", str(obj))


def _jsonable(value: Any) -> Any:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=_default)
    return json.loads(text)


def _attributes(obj: Any) -> dict[str, Any]:
    if isinstance(obj, types.ModuleType):
        return {}
    return dict(vars(obj))


class CodeEnvironment(Environment):
    """An episode over Python objects that implement the tools (see the module docstring)."""

    def __init__(
        self,
        domain: str,
        targets: Sequence[str],
        toolset: Toolset,
        *,
        seed: int = 0,
        initial_state: Mapping[str, Any] | None = None,
        validate_arguments: bool = True,
        error_key: str | None = "error",
        max_steps: int = 64,
        max_observation_chars: int | None = 16_000,
    ) -> None:
        super().__init__(max_steps=max_steps, max_observation_chars=max_observation_chars)
        self.domain = domain
        self.targets = list(targets)
        self.toolset = toolset
        self.seed = seed
        self.initial_state = dict(initial_state) if initial_state else None
        self.validate_arguments = validate_arguments
        self.error_key = error_key
        self.objects: dict[str, Any] = {}
        self.routes: dict[str, tuple[str, str]] = {}  # tool → (class name, method name)
        self._hash: str | None = None
        self._load(self.initial_state)

    # 1-2) load
    def _load(self, initial_state: Mapping[str, Any] | None) -> None:
        self.objects, self.routes, self._hash = {}, {}, None
        for target in self.targets:
            cls_name, make = load_target(target)
            obj = make()
            config = copy.deepcopy((initial_state or {}).get(cls_name))
            loader = getattr(obj, "_load_scenario", None)
            if callable(loader):  # BFCL's classes load even an empty scenario (defaults)
                loader(config if config is not None else {})
            elif isinstance(config, Mapping):
                for k, v in config.items():
                    setattr(obj, k, v)
            self.objects[cls_name] = obj
            for method in _methods(obj):
                self.routes.setdefault(method, (cls_name, method))
        for spec in self.toolset:
            original = spec.original_name()
            if spec.name not in self.routes and original in self.routes:
                self.routes[spec.name] = self.routes[original]

    def _reset(self, task: GroundTruth | None) -> None:
        init = self.initial_state
        if task is not None:
            self.seed = task.env_seed
            if task.initial_state is not None:
                init = task.initial_state
        self._load(init)

    # 3) a call
    def _execute(self, call: ToolCall) -> ToolResult:
        spec = self.toolset.get(call.name)
        route = self.routes.get(call.name)
        args = read_arguments(call, spec if route else None, validate=self.validate_arguments)
        if isinstance(args, ToolResult):
            return args
        assert spec is not None and route is not None
        obj = self.objects[route[0]]
        self._hash = None
        try:
            output = getattr(obj, route[1])(**copy.deepcopy(args))
        except ToolError as exc:
            return error_result(call, args, exc.category, exc.message)
        except Exception as exc:  # the implementation's own failure, shown to the model
            return error_result(call, args, "tool_crashed", f"{type(exc).__name__}: {exc}")
        try:
            output = _jsonable(output)
        except (ValueError, OverflowError, RecursionError) as exc:  # 10**5000, a cycle
            return error_result(call, args, "tool_crashed", f"output is not JSON: {exc}"[:300])
        if (
            self.error_key
            and isinstance(output, dict)
            and set(output) == {self.error_key}
            and isinstance(output[self.error_key], str)
        ):
            return error_result(call, args, "invalid_value", output[self.error_key])
        return ToolResult(call.id, call.name, args, output=output)

    # 4) state
    def _snapshot_state(self) -> dict[str, dict[str, Any]]:
        return {n: copy.deepcopy(_attributes(o)) for n, o in self.objects.items()}

    def _restore_state(self, state: dict[str, dict[str, Any]]) -> None:
        for n, attrs in state.items():
            obj = self.objects[n]
            if not isinstance(obj, types.ModuleType):
                obj.__dict__.clear()
                obj.__dict__.update(copy.deepcopy(attrs))
        self._hash = None

    def _extra(self) -> dict[str, Any]:
        return {"seed": self.seed}

    def _restore_extra(self, extra: dict[str, Any]) -> None:
        self.seed = extra.get("seed", self.seed)

    def state(self) -> dict[str, Any]:
        return {n: _jsonable(_attributes(o)) for n, o in self.objects.items()}

    def state_hash(self) -> str:
        if self._hash is None:
            self._hash = stable_hash(self.state())
        return self._hash

    def diff(self, a: EnvSnapshot, b: EnvSnapshot | None = None) -> StateDiff:
        before = State({n: _jsonable(attrs) for n, attrs in a.state.items()})
        after = State(_jsonable(b.state) if b is not None else self.state())
        return diff(before, after)
