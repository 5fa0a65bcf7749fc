"""The :class:`SimulatedEnvironment`: one episode over tools with specs and no implementation,
steps 1-6 of :mod:`trajsynth.envs.simulated` (checks, ids against the ledger, the effect on
the ledger, the answer, a new episode's population)."""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Mapping
from typing import Any

import jsonschema

from ...core.errors import EndpointError
from ...core.ids import canonical_json, seed_from, stable_hash
from ...core.schema import ToolCall
from ...core.task import GroundTruth
from ..base import Environment, EnvSnapshot, ToolResult
from ..calls import read_arguments
from ..domain import apply_overrides
from ..spec import Toolset, ToolSpec
from ..state import Snapshot, State, StateDiff, diff
from ..tools import ToolError
from .answers import AnswerCache, Answerer, ToolQuery, _answer, _result, validate_response
from .effects import _STRICT_CREATE, ToolEffect, id_kind, is_id_param, tool_effect
from .kinds import _closed_kinds, _id_fields, _id_schema, _new_id, with_responses
from .values import make_value

log = logging.getLogger("trajsynth.envs")

#: entities of each kind in a new episode (step 6)
POPULATION = 3


class SimulatedEnvironment(Environment):
    """An episode over tools with specs and no implementation (see the module docstring)."""

    def __init__(
        self,
        domain: str,
        toolset: Toolset,
        *,
        seed: int = 0,
        initial_state: Mapping[str, Any] | None = None,
        answer: Answerer | None = None,
        cache: AnswerCache | None = None,
        validate_arguments: bool = True,
        max_steps: int = 64,
        max_observation_chars: int | None = 16_000,
    ) -> None:
        super().__init__(max_steps=max_steps, max_observation_chars=max_observation_chars)
        self.domain = domain
        self.toolset = with_responses(toolset)
        self.seed = seed
        self.initial_state = dict(initial_state) if initial_state else None
        self.answer = answer
        self.cache = cache if cache is not None else AnswerCache()
        self.validate_arguments = validate_arguments
        self.effects = {t.name: tool_effect(t) for t in self.toolset}
        self._id_fields = _id_fields(self.toolset, self.effects)
        self._closed = _closed_kinds(toolset, self.effects)
        self.db = State()
        self._load(seed, self.initial_state)

    # 6) a new episode
    def population(self, seed: int) -> dict[str, dict[str, Any]]:
        """The seeded entities a new episode starts with (step 6)."""
        rng = random.Random(seed_from("simulated.population", self.domain, seed))
        tables: dict[str, dict[str, Any]] = {}
        for kind in sorted(self._id_fields):
            fields = self._id_fields[kind]
            rows: dict[str, Any] = {}
            for _ in range(POPULATION):
                new_id = _new_id(kind, fields.id_schema, rng)
                record = {f: new_id for f in fields.id_names}
                for fname, fschema in sorted(fields.fields.items()):
                    if fname not in record:
                        record[fname] = make_value(fname, fschema, rng)
                rows[str(new_id)] = record
            tables[kind] = rows
        return tables

    def _entity(self, kind: str, ident: Any) -> dict[str, Any]:
        """A record for an id of a kind no tool produces (the user knows it from elsewhere):
        seeded by (seed, kind, id), so it is the same whenever it is first named."""
        rng = random.Random(seed_from("simulated.entity", self.domain, self.seed, kind, ident))
        fields = self._id_fields.get(kind)
        record: dict[str, Any] = {f: ident for f in (fields.id_names if fields else ["id"])}
        for fname, fschema in sorted((fields.fields if fields else {}).items()):
            record.setdefault(fname, make_value(fname, fschema, rng))
        return record

    def _load(self, seed: int, initial_state: Mapping[str, Any] | None) -> None:
        self.db = State(self.population(seed))
        if initial_state:
            apply_overrides(self.db, initial_state)

    def _reset(self, task: GroundTruth | None) -> None:
        if task is None:
            self._load(self.seed, self.initial_state)
        else:
            self.seed = task.env_seed
            init = task.initial_state if task.initial_state is not None else self.initial_state
            self._load(task.env_seed, init)

    # 1-5) one call
    def _execute(self, call: ToolCall) -> ToolResult:
        spec = self.toolset.get(call.name)
        args = read_arguments(call, spec, validate=self.validate_arguments)
        if isinstance(args, ToolResult):
            return args
        assert spec is not None
        before = self.db.hash()
        query_call = {"name": spec.name, "arguments": json.loads(canonical_json(args))}
        key = stable_hash([self.seed, before, query_call])
        cached = self.cache.get(key)
        if cached is not None:
            output, error, after = cached
            if error is None and after is not None:
                self.db.restore(after)
            return ToolResult(call.id, call.name, args, output=output, error=error)
        snap = self.db.snapshot()
        rng = random.Random(seed_from("simulated.call", self.seed, before, query_call))
        try:
            output = self._world(spec, self.effects[spec.name], args, rng)
            error = None
        except ToolError as exc:
            self.db.restore(snap)
            output, error = None, exc.to_json()
        if self.answer is not None and error is None:
            try:
                output, error = self._ask(spec, query_call, before, output, error)
            except EndpointError:  # no answer: the call did not happen
                self.db.restore(snap)
                raise
        after = self.db.snapshot() if error is None else None
        self.cache.put(key, (output, error, after))
        return ToolResult(call.id, call.name, args, output=output, error=error)

    def _world(
        self, spec: ToolSpec, effect: ToolEffect, args: dict[str, Any], rng: random.Random
    ) -> Any:
        """Steps 3-5: check ids, change the ledger, propose the answer."""
        props = spec.properties()
        creating = effect.action == "create"
        for p, value in args.items():  # 3) every id the call names must exist
            if not is_id_param(p, props.get(p)):
                continue
            kind = effect.kind if p == effect.key else id_kind(p)
            if kind is None or kind not in self.db.tables() or (creating and kind == effect.kind):
                continue
            for v in value if isinstance(value, list) else [value]:
                if self.db.has(kind, str(v)):
                    continue
                if kind in self._closed:
                    raise ToolError("not_found", f"no {kind.replace('_', ' ')} with id {v!r}")
                self.db.put(kind, str(v), self._entity(kind, v))  # an id only the user knows
        scalars = {k: v for k, v in args.items() if not isinstance(v, (dict, list))}
        kind = effect.kind
        fields = self._id_fields.get(kind)
        id_names = fields.id_names if fields else [effect.key or f"{kind}_id"]
        if creating:  # 4)
            given = args.get(effect.key) if effect.key else None
            if given is not None and self.db.has(kind, str(given)):
                if effect.verb in _STRICT_CREATE:
                    raise ToolError(
                        "conflict", f"{kind.replace('_', ' ')} {given!r} already exists"
                    )
                # book / reserve / buy an existing entity: the call acts on it
                changes = {k: v for k, v in scalars.items() if k != effect.key}
                record = {**self.db.get(kind, str(given)), **changes}
                self.db.put(kind, str(given), record)
                facts = {"status": "confirmed", "success": True, **record}
                return _answer(spec, facts, rng, result=record)
            new_id = given if given is not None else _new_id(kind, _id_schema(fields), rng)
            record = {**{k: v for k, v in args.items() if v is not None}}
            record.update({f: new_id for f in id_names})
            self.db.put(kind, str(new_id), record)
            facts = {"status": "created", "success": True, "id": new_id, **record}
            return _answer(spec, facts, rng, result=new_id)
        if effect.action in ("read", "update", "delete") and effect.key is not None:
            ident = args.get(effect.key)
            stored = self.db.get(kind, str(ident)) if ident is not None else None
            if stored is None:
                if kind in self.db.tables():
                    raise ToolError("not_found", f"no {kind.replace('_', ' ')} with id {ident!r}")
                stored = {effect.key: ident}
            record = stored
            if effect.action == "update":
                changes = {k: v for k, v in args.items() if k != effect.key and v is not None}
                if effect.status:
                    changes.setdefault("status", effect.status)
                record = {**record, **changes}
                if self.db.has(kind, str(ident)):
                    self.db.put(kind, str(ident), record)
                facts = {"status": "updated", "success": True, **record}
                return _answer(spec, facts, rng, result=record)
            if effect.action == "delete":
                if self.db.has(kind, str(ident)):
                    self.db.delete(kind, str(ident))
                facts = {"status": "deleted", "success": True, **record}
                return _answer(spec, facts, rng, result={"deleted": ident})
            return _answer(spec, {**scalars, **record}, rng, result=record)
        if effect.action == "search" and kind in self.db.tables():
            rows = [r for _, r in self.db.rows(kind) if _matches(r, scalars)]
            rows = rows or [r for _, r in self.db.rows(kind)]
            facts = {**scalars, "count": len(rows), "total": len(rows)}
            return _answer(spec, facts, rng, rows=rows, result=rows)
        facts = dict(scalars)  # compute: a pure function of the arguments
        return _answer(spec, facts, rng, result=_result(spec, args, rng))

    def _ask(
        self,
        spec: ToolSpec,
        call: dict[str, Any],
        before: str,
        output: Any,
        error: dict[str, str] | None,
    ) -> tuple[Any, dict[str, str] | None]:
        """Step 5: the answering model may rephrase the proposal (kept when invalid)."""
        kinds = {self.effects[spec.name].kind}
        kinds |= {k for p in call["arguments"] if (k := id_kind(p))}
        ledger = {k: dict(self.db.rows(k)) for k in sorted(kinds) if k in self.db.tables()}
        proposal = {"output": output} if error is None else {"error": error}
        query = ToolQuery(self.seed, before, {**spec.to_openai()["function"],
                          "response": spec.response}, call, ledger, proposal)  # fmt: skip
        assert self.answer is not None, "asked only when there is an answering model"
        try:
            answer = self.answer(query)
        except EndpointError:  # the endpoint failed for good: not an answer (see step 5)
            raise
        except Exception as exc:  # the answering function broke: the proposal stands
            log.warning("tool simulator failed on %s: %r", spec.name, exc)
            return output, error
        if answer is None or error is not None:
            return output, error
        if spec.response is not None:
            try:
                validate_response(answer, spec.response)
            except jsonschema.ValidationError:
                return output, error
            except jsonschema.SchemaError:
                pass
        return answer, None

    def _is_terminal(self, name: str) -> bool:
        return False

    # state
    def _snapshot_state(self) -> Snapshot:
        return self.db.snapshot()

    def _restore_state(self, state: Snapshot) -> None:
        self.db.restore(state)

    def _extra(self) -> dict[str, Any]:
        return {"seed": self.seed}

    def _restore_extra(self, extra: dict[str, Any]) -> None:
        self.seed = extra.get("seed", self.seed)

    def state_hash(self) -> str:
        return self.db.hash()

    def state(self) -> dict[str, Any]:
        return self.db.to_json()

    def diff(self, a: EnvSnapshot, b: EnvSnapshot | None = None) -> StateDiff:
        return diff(a.state, self.db if b is None else b.state)


def _matches(record: Mapping[str, Any], filters: Mapping[str, Any]) -> bool:
    shared = [k for k in filters if k in record]
    return all(str(record[k]).lower() == str(filters[k]).lower() for k in shared)
