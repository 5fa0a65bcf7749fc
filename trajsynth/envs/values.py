"""Argument values a tool accepts, from what its schema and description say and from what its
environment is known to hold.

Task synthesis grounds most values in an environment's state; a tool served by someone
else (an MCP server, an imported spec) often has no state to read, and a value of the right
JSON type is not enough: a time zone must be an IANA name, a repository path the
repository, a query valid SQL. In order, for one parameter:

1) :func:`suggested`: the values the spec itself names: ``enum``, ``const``, ``default``,
   ``examples``, and every quoted value in the description ("IANA timezone name (e.g.,
   'America/New_York')", "('local'), ('remote')"), each kept only when it fits the schema
   and its kind (a quoted zone must be a zone this machine knows);
2) :func:`kind`: what the parameter holds, from its ``format`` (``date``, ``date-time``,
   ``time``, ``email``, ``uri``, ``uuid``, ``ipv4``, ``hostname``), else from its name and
   description: ``timezone``, ``path``, ``url``, ``email``, ``uuid``, ``date``,
   ``date-time``, ``time``, ``revision``, ``branch``, ``sql``;
3) :func:`invent`: a value of that kind: known folders and files for paths (folders for a
   repository or directory, files for a file), known revisions and branches, SQL over the
   known tables of the verb the description asks for (SELECT / INSERT / UPDATE / DELETE /
   CREATE TABLE), a common IANA zone, a date, a time in the described format, an address
   at example.com; else a string matching the schema's ``pattern``; else nothing (the
   caller falls back to its own);
4) :class:`Known`: what an environment knows works there: folders and files, values by noun
   (``branch`` → branch names, ``table`` → table names), tables and their columns. An
   environment gives it through ``Environment.value_hints()`` (MCP servers: found by
   calling their read-only tools, :mod:`trajsynth.envs.mcp.probe`).
5) :func:`everyday`: for a tool with no state and no value in its spec (a simulated tool
   from a collection), a string a person would pass where the name says what it holds: a
   place, a country, a language, a person's name, a search phrase, a message, a token.
   Task values that read as values (not "budget draft" as a city or a username) are what a
   student copies from a request into a call.
"""

from __future__ import annotations

import datetime as dt
import random
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..core.jsonvalues import name_tokens, pattern_search
from . import vocab
from .verifiers.schema import type_ok

__all__ = [
    "Known",
    "everyday",
    "fits_kind",
    "invent",
    "kind",
    "paths_for",
    "pattern_value",
    "suggested",
]

_JSON_TYPES = {"string", "integer", "number", "boolean", "array", "object", "null"}
_QUOTED = re.compile(r"'([^'\n]{1,80})'|\"([^\"\n]{1,80})\"|`([^`\n]{1,80})`")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[a-z]{2,}$", re.IGNORECASE)
_FORMATS = {
    "date": "date", "date-time": "date-time", "datetime": "date-time", "time": "time",
    "email": "email", "idn-email": "email", "uri": "url", "url": "url", "iri": "url",
    "uri-reference": "url", "uuid": "uuid", "ipv4": "ipv4", "hostname": "hostname",
}  # fmt: skip
#: time zones offered when a description names none this machine knows
COMMON_ZONES = (
    "America/New_York", "Europe/London", "Asia/Tokyo", "Europe/Paris", "America/Chicago",
    "Australia/Sydney", "Asia/Kolkata", "America/Los_Angeles", "Europe/Berlin", "UTC",
)  # fmt: skip
_WORDS = ("alpha", "report", "notes", "budget", "summary", "draft", "plan", "review")
_DIR_WORDS = {"dir", "directory", "folder", "repo", "repository", "root", "cwd", "workspace"}
_FILE_WORDS = {"file", "filename", "files", "source", "destination", "document", "doc"}


def _description(schema: dict[str, Any]) -> str:
    return str(schema.get("description") or schema.get("title") or "")


def kind(param: str, schema: dict[str, Any]) -> str | None:
    """Step 2: what ``param`` holds (None: nothing the name, format or description says)."""
    fmt = str(schema.get("format") or "").lower()
    if fmt in _FORMATS:
        return _FORMATS[fmt]
    toks = set(name_tokens(param))
    desc = _description(schema).lower()
    if (
        "timezone" in param.lower()
        or {"tz", "zone"} & toks
        or "iana" in desc
        or "time zone" in desc
        or "timezone" in desc
    ):
        return "timezone"
    if toks & {"url", "uri", "link", "href", "endpoint", "website"}:
        return "url"
    if "email" in toks or "e-mail" in desc:
        return "email"
    if toks & {"uuid", "guid"}:
        return "uuid"
    if "sql" in desc or ({"query", "sql", "statement"} & toks and re.search(
        r"\b(select|insert|update|delete|create table)\b", desc
    )):  # fmt: skip
        return "sql"
    if toks & ({"path", "paths"} | _DIR_WORDS | {"file", "filename", "files"}) or "path" in desc:
        return "path"
    if toks & {"sha", "hash", "commit", "revision", "rev", "ref", "target"} and (
        "commit" in desc or "branch" in desc or "revision" in desc or toks & {"sha", "revision"}
    ):
        return "revision"
    if "branch" in toks:
        return "branch"
    if "iso 8601" in desc or "iso8601" in desc or toks & {"timestamp", "datetime"}:
        return "date-time"
    if "yyyy-mm-dd" in desc or "date" in toks:
        return "date"
    if "hh:mm" in desc or ("time" in toks and ("24-hour" in desc or "clock" in desc)):
        return "time"
    return None


def fits_kind(value: Any, k: str | None, schema: dict[str, Any] | None = None) -> bool:
    """Whether ``value`` is a plausible value of kind ``k`` (and of the schema's pattern)."""
    if isinstance(value, str) and schema and isinstance(schema.get("pattern"), str):
        try:  # a server's pattern on a value a server returned: under the time limit
            if pattern_search(schema["pattern"], value) is False:  # None: invalid pattern
                return False
        except TimeoutError:
            return False
    if not isinstance(value, str) or k is None:
        return True
    if k == "timezone":
        zones = vocab.zones()
        return value in zones if zones else bool(re.fullmatch(r"[A-Za-z_]+(/[A-Za-z_+-]+)*", value))
    if k == "date":
        try:
            dt.date.fromisoformat(value)
            return True
        except ValueError:
            return False
    if k == "email":
        return bool(_EMAIL.match(value))
    if k == "url":
        return value.startswith(("http://", "https://"))
    if k == "uuid":
        try:
            uuid.UUID(value)
            return True
        except ValueError:
            return False
    return True


def _type_ok(value: Any, schema: dict[str, Any]) -> bool:
    t = schema.get("type")
    kinds = [t] if isinstance(t, str) else [x for x in t or [] if isinstance(x, str)]
    if not kinds:
        for alt in schema.get("anyOf") or schema.get("oneOf") or []:
            if isinstance(alt, dict) and alt.get("type") not in (None, "null"):
                return _type_ok(value, alt)
        return True
    return any(k not in _JSON_TYPES or type_ok(value, k) for k in kinds)


def suggested(param: str, schema: dict[str, Any]) -> list[Any]:
    """Step 1: the values the spec names for ``param``, that fit it."""
    if not isinstance(schema, dict):
        return []
    raw: list[Any] = []
    if isinstance(schema.get("enum"), list):
        raw += schema["enum"]
    if "const" in schema:
        raw.append(schema["const"])
    if schema.get("default") is not None:
        raw.append(schema["default"])
    if isinstance(schema.get("examples"), list):
        raw += schema["examples"]
    elif schema.get("example") is not None:
        raw.append(schema["example"])
    for m in _QUOTED.finditer(_description(schema)):
        text = next(g for g in m.groups() if g is not None).strip()
        if text:
            raw.append(text)
    k = kind(param, schema)
    out: list[Any] = []
    for v in raw:
        if isinstance(v, str) and not _type_ok(v, schema) and _type_ok(0, schema):
            try:  # a quoted number for a numeric parameter
                v = int(v) if re.fullmatch(r"-?\d+", v) else float(v)
            except ValueError:
                continue
        if _type_ok(v, schema) and fits_kind(v, k, schema) and v not in out:
            out.append(v)
    return out


@dataclass
class Known:
    """Step 4: what an environment is known to hold (see the module docstring)."""

    dirs: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    nouns: dict[str, list[Any]] = field(default_factory=dict)
    tables: dict[str, list[list[str]]] = field(default_factory=dict)  # table → [[col, type]]

    @classmethod
    def from_hints(cls, hints: dict[str, Any] | None) -> Known:
        hints = hints or {}
        return cls(
            dirs=list(hints.get("dirs") or []),
            files=list(hints.get("files") or []),
            nouns={str(k): list(v) for k, v in (hints.get("nouns") or {}).items()},
            tables={str(k): [list(c) for c in v] for k, v in (hints.get("tables") or {}).items()},
        )

    def for_param(self, param: str) -> list[Any]:
        """Values known under a noun of the parameter's name (``branch_name`` → branches)."""
        out: list[Any] = []
        for tok in name_tokens(param):
            for noun in (tok, tok.removesuffix("s")):
                for v in self.nouns.get(noun, []):
                    if v not in out:
                        out.append(v)
        return out


def paths_for(param: str, schema: dict[str, Any], known: Known) -> list[str]:
    """The known folders and files a path parameter may take: folders for a folder or a
    repository, files for a file, both otherwise."""
    toks = set(name_tokens(param))
    desc = _description(schema).lower()
    wants_dir = bool(toks & _DIR_WORDS) or "directory" in desc or "folder" in desc
    wants_file = bool(toks & _FILE_WORDS) or "file" in desc
    if wants_dir and not wants_file:
        return known.dirs or known.files
    if wants_file and not wants_dir:
        return known.files or known.dirs
    return known.dirs + known.files


def _literal(value: str | None, sql_type: str, rng: random.Random) -> str:
    t = (sql_type or "").upper()
    if any(x in t for x in ("INT", "REAL", "NUM", "FLOA", "DOUB", "DEC")):
        return str(rng.randint(1, 40)) if "INT" in t else f"{rng.randint(1, 99)}.5"
    return "'" + (value or rng.choice(_WORDS)).replace("'", "''") + "'"


def _sql(schema: dict[str, Any], known: Known, rng: random.Random) -> str | None:
    desc = _description(schema).upper()
    verbs = [v for v in ("SELECT", "INSERT", "UPDATE", "DELETE", "CREATE TABLE") if v in desc]
    verb = rng.choice(verbs) if verbs else "SELECT"
    if verb == "CREATE TABLE":
        name = f"{rng.choice(_WORDS)}_{rng.randint(2, 99)}"
        return f"CREATE TABLE {name} (id INTEGER PRIMARY KEY, title TEXT, amount REAL)"
    if not known.tables:
        return None
    table = rng.choice(sorted(known.tables))
    cols = [c for c in known.tables[table] if c and c[0]]
    data = [c for c in cols if c[0].lower() not in ("id", "rowid")] or cols
    if verb == "SELECT":
        if data and rng.random() < 0.5:
            column = rng.choice(data)[0]
            return f"SELECT {column} FROM {table}"
        return f"SELECT * FROM {table}" if rng.random() < 0.6 else f"SELECT COUNT(*) FROM {table}"
    if not data:
        return None
    if verb == "INSERT":
        names = ", ".join(c[0] for c in data)
        values = ", ".join(_literal(None, c[1] if len(c) > 1 else "", rng) for c in data)
        return f"INSERT INTO {table} ({names}) VALUES ({values})"
    col = rng.choice(data)
    key = cols[0][0]
    if verb == "UPDATE":
        value = _literal(None, col[1] if len(col) > 1 else "", rng)
        return f"UPDATE {table} SET {col[0]} = {value} WHERE {key} = {rng.randint(1, 3)}"
    return f"DELETE FROM {table} WHERE {key} = {rng.randint(1, 3)}"


def pattern_value(pattern: str, rng: random.Random) -> str | None:
    """A string that matches ``pattern`` (None for what this small generator cannot)."""
    try:
        from re import _parser as sre  # type: ignore[attr-defined]  # private, not in typeshed

        tree = sre.parse(pattern)
    except Exception:
        return None
    consts = re._constants  # type: ignore[attr-defined]  # private, not in typeshed
    letters, digits = "abcdefghijklmnopqrstuvwxyz", "0123456789"

    def one(item: tuple[Any, Any]) -> str | None:
        op, arg = item
        if op is consts.LITERAL:
            return chr(arg)
        if op is consts.ANY:
            return rng.choice(letters)
        if op is consts.AT:
            return ""
        if op is consts.IN:
            chars: list[str] = []
            for sub, val in arg:
                if sub is consts.NEGATE:
                    return rng.choice(letters)
                if sub is consts.LITERAL:
                    chars.append(chr(val))
                elif sub is consts.RANGE:
                    chars += [chr(c) for c in range(val[0], min(val[1], val[0] + 60) + 1)]
                elif sub is consts.CATEGORY:
                    chars += list(digits if "DIGIT" in str(val) else letters)
            return rng.choice(chars) if chars else None
        if op in (consts.MAX_REPEAT, consts.MIN_REPEAT):
            lo, hi, sub = arg
            n = rng.randint(lo, max(lo, min(hi if hi != consts.MAXREPEAT else lo + 6, lo + 6)))
            parts = [seq(sub) for _ in range(n)]
            made = [p for p in parts if p is not None]
            return None if len(made) < len(parts) else "".join(made)
        if op is consts.SUBPATTERN:
            return seq(arg[-1])
        if op is consts.BRANCH:
            return seq(rng.choice(arg[1]))
        if op is consts.CATEGORY:
            return rng.choice(digits if "DIGIT" in str(arg) else letters)
        return None

    def seq(items: Iterable[Any]) -> str | None:
        out = []
        for item in items:
            part = one(item)
            if part is None:
                return None
            out.append(part)
        return "".join(out)

    value = seq(tree)
    if value is None:
        return None
    try:
        return value if re.fullmatch(pattern, value) else None
    except re.error:
        return None


def invent(
    param: str, schema: dict[str, Any], rng: random.Random, known: Known | None = None
) -> Any | None:
    """Step 3: a string value of the parameter's kind (None: no kind, or nothing known)."""
    known = known or Known()
    k = kind(param, schema)
    value: Any = None
    if k == "timezone":
        zones = vocab.zones()
        value = rng.choice([z for z in COMMON_ZONES if not zones or z in zones])
    elif k == "path":
        options = paths_for(param, schema, known)
        value = rng.choice(options) if options else None
    elif k == "sql":
        value = _sql(schema, known, rng)
    elif k in ("revision", "branch"):
        options = known.nouns.get(k) or known.for_param(param)
        if not options and k == "revision":
            options = known.nouns.get("branch") or ["HEAD"]
        value = rng.choice(options) if options else f"{rng.choice(_WORDS)}-{rng.randint(2, 99)}"
    elif k == "email":
        value = f"{rng.choice(_WORDS)}{rng.randint(1, 99)}@example.com"
    elif k == "url":
        value = f"https://example.com/{rng.choice(_WORDS)}"
    elif k == "uuid":
        value = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    elif k == "ipv4":
        value = f"192.0.2.{rng.randint(1, 254)}"
    elif k == "hostname":
        value = f"{rng.choice(_WORDS)}.example.com"
    elif k == "date":
        value = f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    elif k == "date-time":
        value = (
            f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(8, 18):02d}:00:00"
        )
    elif k == "time":
        value = f"{rng.choice([9, 10, 11, 13, 14, 15, 16]):02d}:{rng.choice(['00', '30'])}"
    if value is None and isinstance(schema.get("pattern"), str):
        value = pattern_value(schema["pattern"], rng)
    return value


# --------------------------------------------------------------------------------------
# everyday values: what a person would pass where a parameter's name says what it holds
# --------------------------------------------------------------------------------------

_PLACES = (
    "Paris", "Paris, France", "Berlin", "Berlin, Germany", "Tokyo", "Tokyo, Japan",
    "Austin, TX", "Seattle, WA", "Boston, MA", "Chicago, IL", "San Diego, CA", "Denver, CO",
    "Toronto", "Toronto, Canada", "Sydney, Australia", "Madrid", "Lisbon, Portugal",
    "Mumbai, India", "Nairobi, Kenya", "Mexico City", "Portland, OR", "Miami, FL",
    "Cape Town", "Seoul", "Dublin, Ireland", "Vancouver, BC",
)  # fmt: skip
_COUNTRIES = {
    "France": "FR", "Germany": "DE", "Japan": "JP", "Canada": "CA", "Brazil": "BR",
    "India": "IN", "Kenya": "KE", "Australia": "AU", "Mexico": "MX", "Italy": "IT",
    "Spain": "ES", "South Korea": "KR", "United States": "US", "United Kingdom": "GB",
}  # fmt: skip
_LANGUAGES = {
    "English": "en", "Spanish": "es", "French": "fr", "German": "de", "Japanese": "ja",
    "Portuguese": "pt", "Hindi": "hi", "Arabic": "ar", "Korean": "ko", "Italian": "it",
}  # fmt: skip
_COMPANIES = ("Acme Corp", "Globex", "Initech", "Northwind Traders", "Contoso", "Umbrella Labs")
_TOPICS = (
    "electric cars", "vegan recipes", "machine learning", "climate change", "jazz concerts",
    "budget travel", "home workouts", "solar panels", "remote jobs", "ancient Rome",
    "sourdough bread", "marathon training", "indie games", "coffee shops", "mortgage rates",
    "renewable energy", "bird watching", "chess openings",
)  # fmt: skip
_TEXTS = (
    "Running 10 minutes late, start without me.",
    "Please review the draft by Friday.",
    "Thanks for the quick reply!",
    "The meeting moved to the small conference room.",
    "Great service, the delivery came a day early.",
    "Remember to bring the signed contract.",
    "Can we push the call to next week?",
    "Happy birthday! Hope you have a great day.",
)
_LABELS = ("travel", "music", "sports", "finance", "health", "science", "food", "technology")
_PERSON_ROLES = {
    "author", "receiver", "recipient", "sender", "contact", "person", "customer", "owner",
    "employee", "patient", "artist", "player", "guest", "attendee", "member", "driver",
    "passenger", "assignee", "doctor", "teacher", "manager", "friend", "speaker", "host",
    "organizer", "participant", "traveler", "buyer", "seller", "landlord", "tenant",
}  # fmt: skip
_STREETS = (
    "221 Baker Street", "1600 Amphitheatre Parkway", "742 Evergreen Terrace",
    "12 Harbour Road", "88 Queen Street West", "350 Fifth Avenue", "4 Rue de Rivoli",
)  # fmt: skip
_STATES = {
    "California": "CA", "Texas": "TX", "New York": "NY", "Washington": "WA", "Illinois": "IL",
    "Florida": "FL", "Colorado": "CO", "Oregon": "OR", "Massachusetts": "MA",
}  # fmt: skip
_CURRENCY = ("USD", "EUR", "GBP", "JPY", "CAD", "AUD", "CHF")
_PLACE_WORDS = {"city", "location", "place", "town", "destination", "origin", "venue", "locality"}
_TOPIC_WORDS = {
    "query", "keyword", "keywords", "q", "search", "term", "topic", "subject", "title",
    "genre", "interest", "hobby",
}  # fmt: skip
_TEXT_WORDS = {
    "content", "text", "message", "body", "comment", "note", "notes", "summary", "caption",
    "review", "feedback", "thought", "reason",
}  # fmt: skip


def everyday(param: str, schema: dict[str, Any], rng: random.Random) -> str | None:
    """Step 5: an everyday string for a parameter whose name says what it holds, for a tool
    with no state to draw from and no value in its spec: a place ("Austin, TX", "Paris" —
    with and without its region, as people write them), a street address, a zip code, a US
    state, a stock ticker, an IP address, a phone number, a currency (or a pair), a country
    or language (its name, or its code where the name or description says code or ISO), a
    person's name (full, first, last) or a username, a company, a search phrase, a short
    message, a label, a token or password, a one-time code. None: the name says none of
    these (the caller falls back)."""
    toks = set(name_tokens(param))
    desc = _description(schema).lower()
    coded = bool({"code", "iso", "alpha2"} & toks) or "iso" in desc or " code" in desc
    if toks & {"token", "password", "passwd", "secret"} or {"api", "key"} <= toks:
        return "".join(rng.choice("abcdefghjkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789")
                       for _ in range(12))  # fmt: skip
    if toks & {"otp", "pin"} or {"verification", "code"} <= toks:
        return f"{rng.randint(0, 999999):06d}"
    if toks & {"id", "ids", "uuid", "url", "email", "path", "file", "filename", "date", "time"}:
        return None  # kinds of their own (or ids, which a pool gives)
    if toks & {"ip", "ipv4"}:
        return f"203.0.113.{rng.randint(2, 254)}"
    if toks & {"phone", "mobile", "tel", "telephone"}:
        return f"+1 415 555 {rng.randint(100, 999):04d}"
    if toks & {"zip", "zipcode", "postal", "postcode"}:
        return f"{rng.randint(10000, 99999)}"
    if toks & {"address", "street"}:
        return rng.choice(_STREETS)
    if "currency" in toks:
        a, b = rng.sample(_CURRENCY, 2)
        return f"{a}/{b}" if "pair" in toks else a
    if "state" in toks and (toks & {"name", "abbreviation", "code"} or "us state" in desc):
        name = rng.choice(list(_STATES))
        return _STATES[name] if "abbreviation" in toks or coded else name
    if toks & {"ticker", "symbol", "symbols"} and ("stock" in desc or "ticker" in toks):
        return rng.choice(("AAPL", "MSFT", "TSLA", "NVDA", "AMZN", "GOOGL"))
    if "country" in toks or "alpha2" in toks:
        name = rng.choice(list(_COUNTRIES))
        return _COUNTRIES[name] if coded else name
    if toks & {"language", "lang", "locale"}:
        name = rng.choice(list(_LANGUAGES))
        return _LANGUAGES[name] if coded or "locale" in toks else name
    first, last = vocab.first_name(rng), vocab.last_name(rng)
    if toks & {"username", "login", "handle", "nickname"} or toks == {"user"}:
        return rng.choice([f"{first.lower()}{last[0].lower()}{rng.randint(1, 99)}",
                           f"{first.lower()}_{last.lower()}"])  # fmt: skip
    if "name" in toks and "first" in toks:
        return first
    if ("name" in toks and toks & {"last", "family", "sur"}) or "surname" in toks:
        return last
    if toks & _PERSON_ROLES or (
        toks == {"name"} and re.search(r"\b(person|user|full name)\b", desc)
    ):
        return f"{first} {last}"
    if toks & _PLACE_WORDS and "code" not in toks:
        return vocab.place(rng, _PLACES)
    if toks & {"company", "organization", "organisation", "employer", "brand"}:
        return rng.choice(_COMPANIES) if rng.random() < 0.3 else vocab.company(rng)
    if toks & _TOPIC_WORDS:
        return rng.choice(_TOPICS) if rng.random() < 0.5 else vocab.phrase(rng, 2)
    if toks & _TEXT_WORDS:
        return rng.choice(_TEXTS)
    if toks & {"tag", "tags", "category", "categories", "label"}:
        return rng.choice(_LABELS)
    return None
