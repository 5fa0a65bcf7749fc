"""Step 2 of :mod:`trajsynth.envs.simulated`: what a tool does (create, read, search, update,
delete or compute) to which entity kind, read from its name's leading verb and its id
parameters."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...core.text import split_words
from ..spec import ToolSpec


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
