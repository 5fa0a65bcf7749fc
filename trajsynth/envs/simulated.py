"""The ``simulated`` environment: tools that have a spec but no implementation answer as a
stateful simulator would (ToolACE, Liu et al. 2024, arXiv:2409.00920, §2.2 "tool agent";
Kimi K2, arXiv:2507.20534, §3.1.1 "tool simulator with state"), so that every pipeline runs on
imported specs.

A call is answered in the tool's declared output schema, given the tool's spec and a *ledger*
of what earlier calls in the episode created or changed. The ledger is the environment's state:
one table per entity kind (``order``, ``user``, ...), ``id → record``; so snapshot/restore,
``state_hash`` and ``diff`` work as in every other environment (TSR, STeCa, GiGPO and
final-state verification run unchanged).

Steps of one call:

1) checks, as in every environment: unknown tool, arguments not a JSON object or breaking the
   tool's schema → an error observation;
2) what the tool does (:func:`tool_effect`), from its name's leading verb: ``create``
   (create, add, book, send, ...), ``read`` (get, fetch, show, ...), ``search`` (search,
   list, find, ...), ``update`` (update, set, edit, ...), ``delete`` (delete, cancel,
   remove, ...), else ``compute`` (a pure function of its arguments). Its entity kind comes
   from an id parameter (``order_id`` → ``order``) or from the rest of its name
   (``create_order`` → ``order``);
3) ids are checked against the ledger: an id-like argument (``id``, ``*_id``, ``*Id``) of a
   kind some tool creates, lists or returns must name an entity of that kind, else
   ``not_found``; an id of a kind no tool produces is one the user knows from elsewhere: its
   entity is made (seeded by the id) and kept. A ``create``/``register`` with an id the
   ledger holds is a ``conflict``; ``book``/``reserve``/... of an existing id act on it;
4) the effect on the ledger: create puts a new record (its id drawn from the seed and the
   state, or the one given), update merges the scalar arguments into the record, delete
   removes it; read, search and compute change nothing;
5) the answer: the world's proposal fills the response schema from the entity's record, the
   arguments and seeded values of each field's type (enum, date, email, ...): always valid
   against the schema. An answering model (the ``tool`` LLM role, ``answer=``) may replace the
   proposal; an answer that is not valid against the response schema is discarded and the
   proposal kept. An endpoint that failed for good (an
   :class:`~trajsynth.core.errors.EndpointError` out of the answering model: retries
   exhausted, a bad key) is no answer and no proposal either: it is raised, the call leaves
   the state and the cache as they were, and the episode is lost to the endpoint. Answers are
   cached by (seed, state hash, call), so a replay, and a branch
   restored from a snapshot, gets the identical answer;
6) a new episode starts from a seeded population: a few entities of every kind an id
   parameter names, with the fields the specs give them, so grounded calls find ids to use;
   ``initial_state`` (``{kind: {id: record | None}}``) is merged on top.

Everything is deterministic given (seed, state, call): no clock, no global randomness.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import random
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema

from ..core.errors import EndpointError
from ..core.ids import canonical_json, seed_from, stable_hash
from ..core.jsonvalues import pattern_search
from ..core.schema import ToolCall
from ..core.task import GroundTruth
from ..core.text import split_words
from .base import Environment, EnvSnapshot, ToolResult
from .calls import read_arguments
from .domain import apply_overrides
from .spec import Toolset, ToolSpec
from .state import Snapshot, State, StateDiff, diff
from .tools import ToolError
from .verifiers.schema import type_ok

__all__ = [
    "AnswerCache",
    "SimulatedEnvironment",
    "ToolEffect",
    "ToolQuery",
    "is_id_param",
    "tool_effect",
    "with_responses",
]

log = logging.getLogger("trajsynth.envs")


# --------------------------------------------------------------------------------------
# the answer's check against the tool's response schema, with bounded patterns
# --------------------------------------------------------------------------------------


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Any:
    """jsonschema's ``pattern`` keyword under :func:`pattern_search`'s time limit (the
    instance is a model's answer; one that cannot be matched in time does not match)."""
    if validator.is_type(instance, "string"):
        try:
            matched = pattern_search(pattern, instance)
        except TimeoutError:
            matched = False
        if matched is False:
            yield jsonschema.ValidationError(f"{instance[:200]!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, properties: Any, instance: Any, schema: Any) -> Any:
    """jsonschema's ``patternProperties`` keyword, its keys matched under the time limit."""
    if validator.is_type(instance, "object"):
        for pattern, subschema in properties.items():
            for k, v in instance.items():
                try:
                    matched = pattern_search(pattern, k)
                except TimeoutError:
                    matched = False
                if matched:
                    yield from validator.descend(v, subschema, path=k, schema_path=pattern)


_BOUNDED: dict[type, type] = {}


def validate_response(answer: Any, schema: dict[str, Any]) -> None:
    """``jsonschema.validate(answer, schema)``, with ``pattern`` and ``patternProperties``
    matched under a time limit. Raises ``jsonschema.SchemaError`` for a bad schema and
    ``jsonschema.ValidationError`` for an answer that breaks it."""
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    bounded = _BOUNDED.get(cls)
    if bounded is None:
        keywords = {"pattern": _pattern, "patternProperties": _pattern_properties}
        bounded = _BOUNDED[cls] = jsonschema.validators.extend(cls, keywords)
    error = jsonschema.exceptions.best_match(bounded(schema).iter_errors(answer))
    if error is not None:
        raise error


def _split(text: str) -> list[str]:
    return text.split()


#: leading verbs → what a tool does (step 2)
VERBS: dict[str, str] = {
    **dict.fromkeys(
        _split(
            "create add new make post send book register insert upload schedule reserve place "
            "submit write save open start invite share publish compose generate issue enroll "
            "buy purchase order subscribe follow like comment reply apply"
        ),
        "create",
    ),
    **dict.fromkeys(
        _split(
            "get retrieve fetch read show view lookup describe check display obtain load "
            "download inspect verify track"
        ),
        "read",
    ),
    **dict.fromkeys(_split("search list find query browse filter recommend lookup_all"), "search"),
    **dict.fromkeys(
        _split(
            "update edit modify change set rename move patch enable disable toggle mark assign "
            "approve reject pause resume transfer exchange return upgrade mute unmute cancel "
            "close stop end"
        ),
        "update",
    ),
    **dict.fromkeys(
        _split("delete remove archive unsubscribe unfollow unlike clear revoke drop"),
        "delete",
    ),
}

#: verbs whose update sets a status (``cancel_order`` → ``status: "cancelled"``)
_STATUS = {
    "cancel": "cancelled",
    "close": "closed",
    "stop": "stopped",
    "end": "ended",
    "approve": "approved",
    "reject": "rejected",
    "pause": "paused",
    "resume": "active",
}
#: verbs whose given id must be new (others, like book or reserve, act on an existing one)
_STRICT_CREATE = {"create", "register", "insert", "new"}

#: words that end the entity part of a name (``find_user_by_email`` → ``user``)
_STOP = {"by", "for", "with", "from", "in", "on", "to", "using", "via", "at"}

#: trailing words that do not name an entity (``get_order_details`` → ``order``)
_GENERIC = {
    "details", "detail", "info", "information", "data", "status", "by", "for", "of",
    "all", "list", "item", "items", "record", "records", "entry", "entries", "the", "a", "an",
    "new", "current", "my", "api", "v1", "v2", "request", "id", "ids",
}  # fmt: skip

_ID_PARAM = re.compile(r"(^id$|^ids$|_id$|_ids$|[a-z0-9]Id$|[a-z0-9]Ids$|ID$|_uuid$|^uuid$)")

#: entities of each kind in a new episode (step 6)
POPULATION = 3


def _singular(word: str) -> str:
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def is_id_param(name: str, schema: Mapping[str, Any] | None = None) -> bool:
    """An identifier parameter: ``id``, ``*_id``, ``*Id``, ``*ID``, ``*_uuid`` (strings or
    integers, or lists of them for ``*_ids``)."""
    if not _ID_PARAM.search(name):
        return False
    t = (schema or {}).get("type")
    kinds = {t} if isinstance(t, str) else set(t or [])
    return not kinds or bool(kinds & {"string", "integer", "array"})


def id_kind(param: str) -> str | None:
    """The entity kind an id parameter names (``order_id`` → ``order``; ``id`` → None)."""
    ws = split_words(param)
    while ws and ws[-1] in ("id", "ids", "uuid"):
        ws.pop()
    ws = [w for w in ws if w not in _GENERIC]
    return "_".join(_singular(w) for w in ws) or None


@dataclass(frozen=True)
class ToolEffect:
    """Step 2: what a tool does (``action``), to which entity ``kind``, and the parameter that
    names the entity (``key``, None when the tool names none)."""

    action: str  # create | read | search | update | delete | compute
    kind: str
    key: str | None
    status: str | None = None  # what an update sets ``status`` to (cancel → cancelled)
    verb: str = ""


def tool_effect(spec: ToolSpec) -> ToolEffect:
    """Step 2 for one tool (see the module docstring)."""
    ws = split_words(spec.name)
    action, verb = "compute", ""
    for i, w in enumerate(ws[:2]):  # a leading verb, or one after a namespace word
        if w in VERBS:
            action, verb = VERBS[w], w
            ws = ws[i + 1 :]
            break
    stop = next((i for i, w in enumerate(ws) if w in _STOP), len(ws))
    ws = ws[:stop]
    noun = "_".join(_singular(w) for w in ws if w not in _GENERIC) or spec.name.lower()
    props = spec.properties()
    ids = [p for p in props if is_id_param(p, props[p])]
    singles = [p for p in ids if not re.search(r"(_ids|Ids|^ids)$", p)]

    def own(p: str) -> bool:
        k = id_kind(p)
        return bool(k) and f"_{k}_" in f"_{noun}_"

    own_key = next((p for p in singles if own(p)), None) or next((p for p in ids if own(p)), None)
    bare = next((p for p in ids if id_kind(p) is None), None)
    required_ids = [p for p in singles if p in spec.required()]
    key = own_key or bare or (required_ids[0] if action in ("read", "update", "delete") and
                          required_ids else None)  # fmt: skip
    kind = (id_kind(key) if key else None) or noun
    if action in ("read", "update", "delete") and key is None:
        action = "compute"
    return ToolEffect(action, kind, key, _STATUS.get(verb) if action == "update" else None, verb)


# --------------------------------------------------------------------------------------
# schema-valid values
# --------------------------------------------------------------------------------------

_WORDS = ["alpha", "harbor", "maple", "orbit", "cedar", "summit", "river", "nova", "atlas"]
_NAMES = ["Alice Chen", "Bruno Diaz", "Chiara Rossi", "Dev Patel", "Emma Stone", "Farid Khan"]


def _types(schema: Mapping[str, Any]) -> list[str]:
    t = schema.get("type")
    if isinstance(t, str):
        return [t]
    if isinstance(t, list):
        return [x for x in t if isinstance(x, str) and x != "null"] or ["null"]
    if "properties" in schema:
        return ["object"]
    if "items" in schema:
        return ["array"]
    if schema.get("enum"):
        return [_json_kind(schema["enum"][0])]
    return []


def _json_kind(v: Any) -> str:
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return "null"


def _fits(value: Any, schema: Mapping[str, Any]) -> bool:
    if not isinstance(schema, Mapping) or not schema:
        return True
    if schema.get("enum") and value not in schema["enum"]:
        return False
    kinds = _types(schema)
    return (
        not kinds
        or any(type_ok(value, k) for k in kinds if k != "null")
        or (value is None and "null" in (schema.get("type") or []))
    )


def make_value(name: str, schema: Mapping[str, Any], rng: random.Random, depth: int = 0) -> Any:
    """A seeded value valid against ``schema`` (named ``name``, which guides strings)."""
    if not isinstance(schema, Mapping):
        schema = {}
    if schema.get("enum"):
        return rng.choice(list(schema["enum"]))
    if "const" in schema:
        return schema["const"]
    for alt_key in ("anyOf", "oneOf"):
        alts = [a for a in schema.get(alt_key) or [] if isinstance(a, Mapping)]
        alts = [a for a in alts if a.get("type") != "null"] or alts
        if alts:
            return make_value(name, alts[0], rng, depth)
    kinds = _types(schema) or ["string"]
    kind = kinds[0]
    lo, hi = schema.get("minimum"), schema.get("maximum")
    if kind == "integer":
        a = int(lo) if isinstance(lo, (int, float)) else 1
        b = int(hi) if isinstance(hi, (int, float)) else a + 99
        return rng.randint(a, max(a, b))
    if kind == "number":
        low = float(lo) if isinstance(lo, (int, float)) else 1.0
        high = float(hi) if isinstance(hi, (int, float)) else low + 999.0
        return round(rng.uniform(low, max(low, high)), 2)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    if kind == "array":
        items = schema["items"] if isinstance(schema.get("items"), Mapping) else {}
        n = max(int(schema.get("minItems") or 0), 1 if depth < 3 else 0)
        n = min(n + rng.randint(0, 1), int(schema.get("maxItems") or 3))
        return [make_value(_singular(name), items, rng, depth + 1) for _ in range(n)]
    if kind == "object":
        props = schema.get("properties") or {}
        if not isinstance(props, Mapping) or depth >= 4:
            return {}
        return {k: make_value(k, s, rng, depth + 1) for k, s in props.items()}
    return _string(name, schema, rng)


def _string(name: str, schema: Mapping[str, Any], rng: random.Random) -> str:
    fmt = str(schema.get("format") or "")
    text = f"{name} {schema.get('description') or ''}".lower()
    day = dt.date(2025, 1, 1) + dt.timedelta(days=rng.randint(0, 364))
    if fmt == "date-time" or "datetime" in text or "timestamp" in text:
        return f"{day.isoformat()}T{rng.randint(8, 18):02d}:{rng.choice(['00', '30'])}:00Z"
    if fmt == "date" or re.search(r"\bdate\b|yyyy", text) or name.endswith("_date"):
        return day.isoformat()
    if fmt == "email" or "email" in name.lower():
        return f"{rng.choice(_WORDS)}.{rng.randint(1, 99)}@example.com"
    if fmt in ("uri", "url") or name.lower().endswith(("url", "uri", "link")):
        return f"https://example.com/{rng.choice(_WORDS)}/{rng.randint(1, 999)}"
    if is_id_param(name):
        return f"{(id_kind(name) or 'id')[:3]}_{rng.randint(1000, 9999)}"
    if name.lower() in ("name", "full_name", "username", "user_name", "author", "owner"):
        return rng.choice(_NAMES)
    if "phone" in name.lower():
        return f"+1-555-{rng.randint(100, 999)}-{rng.randint(1000, 9999)}"
    if re.search(r"\btime\b", text):
        return f"{rng.randint(8, 18):02d}:{rng.choice(['00', '30'])}"
    return f"{rng.choice(_WORDS)} {rng.choice(_WORDS)} {rng.randint(1, 99)}"


def fill(
    schema: Mapping[str, Any] | None,
    name: str,
    facts: Mapping[str, Any],
    rng: random.Random,
    depth: int = 0,
    rows: list[Mapping[str, Any]] | None = None,
) -> Any:
    """Step 5: a value valid against ``schema`` that states ``facts`` (record fields and
    arguments by name) where their names and types fit; ``rows`` fill an array of objects."""
    if not isinstance(schema, Mapping) or not schema:
        return dict(facts)
    kinds = _types(schema)
    if "object" in kinds and isinstance(schema.get("properties"), Mapping) and depth < 4:
        out: dict[str, Any] = {}
        for k, sub in schema["properties"].items():
            if k in facts and _fits(facts[k], sub):
                out[k] = facts[k]
            else:
                out[k] = fill(sub, k, facts if _nested(sub) else {}, rng, depth + 1, rows)
        return out
    if "array" in kinds and isinstance(schema.get("items"), Mapping):
        items = schema["items"]
        if rows is not None and "object" in _types(items):
            cap = int(schema.get("maxItems") or 10)
            return [fill(items, _singular(name), r, rng, depth + 1) for r in rows[:cap]]
        if name in facts and _fits(facts[name], schema):
            return facts[name]
    if name in facts and _fits(facts[name], schema):
        return facts[name]
    return make_value(name, schema, rng, depth)


def _nested(schema: Mapping[str, Any]) -> bool:
    return "object" in _types(schema)


# --------------------------------------------------------------------------------------
# answering
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolQuery:
    """What an answering model is given for one call (step 5)."""

    seed: int
    state_hash: str
    tool: dict[str, Any]  # the spec: name, description, parameters, response
    call: dict[str, Any]  # {name, arguments}
    ledger: dict[str, dict[str, Any]]  # the entity tables the call involves
    proposal: dict[str, Any]  # the world's answer: {"output": ...} or {"error": {...}}

    def key(self) -> str:
        return stable_hash([self.seed, self.state_hash, self.call])

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "state_hash": self.state_hash,
            "tool": self.tool,
            "call": self.call,
            "ledger": self.ledger,
            "proposal": self.proposal,
        }


class AnswerCache:
    """Answers by (seed, state hash, call), shared by the environments of one factory."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._answers: dict[str, Any] = {}

    def get(self, key: str) -> Any:
        with self._lock:
            return self._answers.get(key)

    #: answers kept at most (then the oldest half is dropped; a dropped answer is recomputed
    #: identically, so this bounds memory, never changes a result)
    LIMIT = 200_000

    def put(self, key: str, value: Any) -> None:
        with self._lock:
            if len(self._answers) >= self.LIMIT:
                for old in list(self._answers)[: self.LIMIT // 2]:
                    del self._answers[old]
            self._answers.setdefault(key, value)

    def __len__(self) -> int:
        return len(self._answers)


#: an answering model: the query → the output (None: keep the proposal)
Answerer = Callable[[ToolQuery], Any]


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


@dataclass
class _Kind:
    id_names: list[str]
    id_schema: dict[str, Any]
    fields: dict[str, dict[str, Any]]


def _id_schema(fields: _Kind | None) -> dict[str, Any]:
    return fields.id_schema if fields else {"type": "string"}


def _id_fields(toolset: Toolset, effects: Mapping[str, ToolEffect]) -> dict[str, _Kind]:
    """Every entity kind an id parameter names, with the names its id goes by and the scalar
    fields the specs give it (create parameters, read responses)."""
    kinds: dict[str, _Kind] = {}
    for spec in toolset:
        props = spec.properties()
        for p, schema in props.items():
            if not is_id_param(p, schema) or p.endswith(("_ids", "Ids")) or p == "ids":
                continue
            kind = effects[spec.name].kind if p == effects[spec.name].key else id_kind(p)
            if kind is None:
                continue
            entry = kinds.setdefault(kind, _Kind([], _scalar_schema(schema), {}))
            if p not in entry.id_names:
                entry.id_names.append(p)
    for spec in toolset:
        eff = effects[spec.name]
        k = kinds.get(eff.kind)
        if k is None:
            continue
        if eff.status:
            k.fields.setdefault("status", {"type": "string"})
        if eff.action in ("create", "update"):
            for p, schema in spec.properties().items():
                if _scalar(schema) and not is_id_param(p, schema):
                    k.fields.setdefault(p, schema)
        if eff.action == "read" and spec.response is not None:
            for p, schema in (spec.response.get("properties") or {}).items():
                if isinstance(schema, dict) and _scalar(schema) and p not in k.id_names:
                    k.fields.setdefault(p, schema)
    for k in kinds.values():
        k.id_names.sort()
    return kinds


def with_responses(toolset: Toolset) -> Toolset:
    """The toolset with a response schema inferred for each tool that declares none, from
    what the simulator will answer (step 2's effect): a create returns the new entity's id,
    a read its record, a search ``results`` (records), an update or delete the id and a
    ``status``; a compute tool keeps no schema (its answer is an untyped ``result``).
    Inferred schemas are marked ``extra["response_inferred"]``; the tools offered to a model
    (``to_openai``) do not change."""
    effects = {t.name: tool_effect(t) for t in toolset}
    kinds = _id_fields(toolset, effects)
    tools = []
    for spec in toolset:
        eff = effects[spec.name]
        k = kinds.get(eff.kind)
        if spec.response is not None or k is None or eff.action == "compute":
            tools.append(spec)
            continue
        ident = {n: dict(k.id_schema) for n in k.id_names}
        record = {**ident, **{f: dict(s) for f, s in sorted(k.fields.items())}}
        if eff.action == "create":
            props = {**ident, "status": {"type": "string"}}
        elif eff.action == "read":
            props = record
        elif eff.action == "search":
            props = {"results": {"type": "array", "items": {"type": "object",
                                 "properties": record}}}  # fmt: skip
        else:
            props = {**ident, "status": {"type": "string"}, "success": {"type": "boolean"}}
        response = {"type": "object", "properties": props}
        extra = {**spec.extra, "response_inferred": True}
        tools.append(spec.model_copy(update={"response": response, "extra": extra}))
    data = {k: getattr(toolset, k) for k in type(toolset).model_fields if k != "tools"}
    return Toolset(**data, tools=tools)


def _closed_kinds(toolset: Toolset, effects: Mapping[str, ToolEffect]) -> set[str]:
    """Kinds whose ids a task can only get from a tool (one creates or lists them, or a
    declared response carries them): an unknown id of these is an error. Ids of other kinds
    are known to the user from elsewhere, and the world takes them."""
    closed = {e.kind for e in effects.values() if e.action in ("create", "search")}

    def walk(schema: Any, depth: int) -> None:
        if not isinstance(schema, Mapping) or depth > 4:
            return
        for name, sub in (schema.get("properties") or {}).items():
            if isinstance(sub, Mapping) and is_id_param(name, sub) and (k := id_kind(name)):
                closed.add(k)
            walk(sub, depth + 1)
        walk(schema.get("items"), depth + 1)

    for spec in toolset:
        walk(spec.response, 0)
    return closed


def _scalar(schema: Mapping[str, Any]) -> bool:
    kinds = _types(schema)
    return bool(kinds) and kinds[0] in ("string", "integer", "number", "boolean")


def _scalar_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    if "integer" in _types(schema):
        return {"type": "integer"}
    return {"type": "string"}


def _new_id(kind: str, schema: Mapping[str, Any], rng: random.Random) -> Any:
    if "integer" in _types(schema):
        return rng.randint(1000, 99999)
    prefix = re.sub(r"[^a-z0-9]", "", kind.lower())[:3] or "id"
    return f"{prefix}_{rng.randint(10000, 99999)}"


def _matches(record: Mapping[str, Any], filters: Mapping[str, Any]) -> bool:
    shared = [k for k in filters if k in record]
    return all(str(record[k]).lower() == str(filters[k]).lower() for k in shared)


def _result(spec: ToolSpec, args: Mapping[str, Any], rng: random.Random) -> Any:
    if spec.response is not None:
        return make_value("result", spec.response, rng)
    return f"{spec.name} result {rng.randint(100, 999)}"


def _answer(
    spec: ToolSpec,
    facts: Mapping[str, Any],
    rng: random.Random,
    *,
    rows: list[Mapping[str, Any]] | None = None,
    result: Any = None,
) -> Any:
    """The proposal: the response schema filled from ``facts``; without a response schema,
    the facts under ``result`` (what the graph's untyped ``result`` field feeds)."""
    if spec.response is None:
        out = {k: v for k, v in facts.items() if not isinstance(v, (dict, list))}
        return {"result": result, **{k: v for k, v in out.items() if k != "result"}}
    value = fill(spec.response, "result", facts, rng, rows=rows)
    if rows is not None and isinstance(value, list):
        return value
    return value
