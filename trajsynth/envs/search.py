"""A search environment: BM25 retrieval over a local document collection (Search-R1's setting:
a search tool, questions with verifiable answers).

- :func:`load_documents`: a folder (or one file) of documents — each ``.txt``/``.md`` file
  one document (its first line the title), each line of a ``.jsonl`` file one document
  (``{"id", "title", "text"}``; ``contents`` is read as ``text``). A collection without
  documents is one :class:`~trajsynth.core.errors.InputNotFoundError` naming it;
- :class:`SearchIndex`: the documents indexed with ``bm25s`` (BM25, English stopwords);
  ``search(query, k)`` returns the best ``k`` with a score, deterministic;
- :func:`search_domain`: a domain whose tools are ``search(query, k)`` (titles and snippets)
  and ``open_document(doc_id)`` (the whole text); it changes nothing (its state is empty),
  so every replay answers alike. ``defaults.env.search: {name: folder}`` offers it to every
  stage as the domain ``name``;
- :func:`tau_collection`: documents and questions built from tau-bench's retail database
  (``orders.json``, ``users.json``, ``products.json``): a document per order, customer and
  product, and questions with one exact answer — single-hop (an order's status, a product's
  price) and multi-hop (the city of the customer who placed an order: the order's document
  names the customer, the customer's names the city).

Questions are rows of a JSONL file (``{"id", "question", "answer", "hops", "docs"}``) that the
``qa_tasks`` stage turns into tasks; their answer is checked by exact match or token F1
(:mod:`trajsynth.envs.verifiers.answer`).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

from ..core.errors import InputNotFoundError
from ..core.ids import file_fingerprint, stable_hash
from .domain import Domain
from .state import State
from .tools import ToolError, tool

__all__ = [
    "Document",
    "Question",
    "SearchIndex",
    "collection_version",
    "load_documents",
    "load_questions",
    "search_domain",
    "tau_collection",
]

_SNIPPET = 240


@dataclass(frozen=True)
class Document:
    id: str
    title: str
    text: str


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise InputNotFoundError(f"{path}: no such document folder or file")
    return sorted(
        p for p in path.rglob("*") if p.is_file() and p.suffix in (".txt", ".md", ".jsonl")
    )


def load_documents(path: str | Path) -> list[Document]:
    """The documents under ``path`` (see the module docstring), in a stable order."""
    root = Path(path)
    docs: list[Document] = []
    for f in _files(root):
        if f.suffix == ".jsonl":
            for n, line in enumerate(f.read_text(encoding="utf-8").splitlines()):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except ValueError as exc:
                    raise InputNotFoundError(f"{f}:{n + 1}: not a JSON document ({exc})") from None
                text = str(rec.get("text") or rec.get("contents") or "")
                if text.strip():
                    doc_id = str(rec.get("id") or f"{f.stem}-{n}")
                    docs.append(Document(doc_id, str(rec.get("title") or doc_id), text))
        else:
            text = f.read_text(encoding="utf-8")
            if text.strip():
                rel = str(f.relative_to(root)) if f != root else f.name
                title = text.strip().splitlines()[0][:120]
                docs.append(Document(rel, title, text))
    if not docs:
        raise InputNotFoundError(
            f"{root}: no documents (.txt, .md or .jsonl with text)",
            hint="point defaults.env.search at a folder of text files or a JSONL of "
            '{"id", "title", "text"}',
        )
    return docs


def collection_version(path: str | Path) -> str:
    """A hash of the collection's files (names and contents)."""
    root = Path(path)
    return stable_hash([(str(f), file_fingerprint(f)) for f in _files(root)])[:16]


class SearchIndex:
    """BM25 over documents (``bm25s``)."""

    def __init__(self, docs: list[Document]) -> None:
        import bm25s

        self.docs = docs
        self.by_id = {d.id: d for d in docs}
        self._bm25s = bm25s
        corpus = [f"{d.title}\n{d.text}" for d in docs]
        self.retriever = bm25s.BM25()
        self.retriever.index(bm25s.tokenize(corpus, stopwords="en", show_progress=False),
                             show_progress=False)  # fmt: skip
        self._lock = threading.Lock()

    def search(self, query: str, k: int = 3) -> list[tuple[Document, float]]:
        k = max(1, min(int(k), len(self.docs)))
        tokens = self._bm25s.tokenize([query], stopwords="en", show_progress=False)
        if not tokens.vocab:  # nothing searchable in the query
            return []
        with self._lock:
            ids, scores = self.retriever.retrieve(tokens, k=k, show_progress=False)
        return [
            (self.docs[int(i)], round(float(s), 4))
            for i, s in zip(ids[0], scores[0], strict=True)
            if float(s) > 0
        ]


_INDEXES: dict[tuple[str, str], SearchIndex] = {}
_INDEX_LOCK = threading.Lock()


def _index(path: str) -> SearchIndex:
    key = (str(Path(path).resolve()), collection_version(path))
    with _INDEX_LOCK:
        index = _INDEXES.get(key)
        if index is None:
            index = _INDEXES[key] = SearchIndex(load_documents(path))
        return index


class Hit(TypedDict):
    doc_id: Annotated[str, "Document id (for open_document)."]
    title: Annotated[str, "The document's title."]
    snippet: Annotated[str, "The start of its text."]
    score: Annotated[float, "BM25 score."]


class Hits(TypedDict):
    results: Annotated[list[Hit], "The best matches, best first."]


class Opened(TypedDict):
    doc_id: Annotated[str, "Document id."]
    title: Annotated[str, "Title."]
    text: Annotated[str, "The whole text."]


def search_domain(name: str, path: str | Path) -> Domain:
    """The domain ``name`` searching the documents under ``path`` (module docstring)."""
    where = str(path)
    load_documents(where)  # an empty or missing collection fails now, naming it

    @tool(name="search")
    def search(
        db: State,
        query: Annotated[str, "What to look for, in words."],
        k: Annotated[int, "How many documents to return (1-10)."] = 3,
    ) -> Hits:
        """Search the document collection; returns the best matching documents."""
        hits = _index(where).search(query, max(1, min(k, 10)))
        return {
            "results": [
                {"doc_id": d.id, "title": d.title, "snippet": d.text[:_SNIPPET], "score": s}
                for d, s in hits
            ]
        }

    @tool(name="open_document")
    def open_document(db: State, doc_id: Annotated[str, "A document id from search."]) -> Opened:
        """Read a whole document."""
        d = _index(where).by_id.get(doc_id)
        if d is None:
            raise ToolError("not_found", f"no document {doc_id!r}")
        return {"doc_id": d.id, "title": d.title, "text": d.text}

    return Domain(
        name=name,
        description=f"Search over the documents of {Path(where).name}.",
        tools=[search, open_document],
        build_state=lambda seed: {"collection": {"version": {"value": collection_version(where)}}},
        policy="Search the documents for the facts you need and answer with the exact value "
        "you found; put the final answer between <answer> and </answer>.",
    )


@dataclass(frozen=True)
class Question:
    """A question with verifiable answers, and the documents that answer it, in hop order."""

    id: str
    question: str
    answers: list[str]
    hops: int
    docs: list[str]


def load_questions(path: str | Path) -> list[Question]:
    """The questions of a JSONL file: ``{"id"?, "question", "answer" (a string or a list of
    accepted strings), "hops"?, "docs"?}`` per line."""
    p = Path(path)
    if not p.is_file():
        raise InputNotFoundError(f"{p}: no such question file")
    out = []
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines()):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            answers = rec["answer"] if isinstance(rec["answer"], list) else [rec["answer"]]
            docs = [str(d) for d in rec.get("docs") or []]
            out.append(
                Question(
                    id=str(rec.get("id") or f"q{n}"),
                    question=str(rec["question"]),
                    answers=[str(a) for a in answers],
                    hops=int(rec.get("hops") or max(1, len(docs))),
                    docs=docs,
                )
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise InputNotFoundError(f"{p}:{n + 1}: not a question record ({exc})") from None
    if not out:
        raise InputNotFoundError(f"{p}: no questions")
    return out


def document_title(path: str | Path, doc_id: str) -> str | None:
    """The title of document ``doc_id`` of the collection under ``path`` (None if absent)."""
    d = _index(str(path)).by_id.get(doc_id)
    return d.title if d is not None else None


# -- a collection from tau-bench's retail database ------------------------------------------


def tau_collection(retail_data: str | Path, out: str | Path, *, questions: int = 40) -> int:
    """Write ``out/docs/retail.jsonl`` (a document per order, customer and product of tau-bench's
    retail ``data`` folder) and ``out/qa.jsonl`` (questions with exact answers: an order's
    status and a product's price — one hop —, the city of the customer who placed an order —
    two hops). Returns how many questions; deterministic."""
    src = Path(retail_data)
    try:
        orders = json.loads((src / "orders.json").read_text())
        users = json.loads((src / "users.json").read_text())
        products = json.loads((src / "products.json").read_text())
    except (OSError, ValueError) as exc:
        raise InputNotFoundError(f"{src}: not tau-bench's retail data ({exc})") from None
    dest = Path(out)
    dest.mkdir(parents=True, exist_ok=True)
    docs: list[dict[str, Any]] = []
    for oid, o in sorted(orders.items()):
        items = ", ".join(sorted({i["name"] for i in o.get("items", [])}))
        docs.append({"id": f"order-{oid.lstrip('#')}", "title": f"Order {oid}",
                     "text": f"Order {oid} was placed by the customer {o['user_id']}. "
                             f"Status: {o['status']}. Items: {items}."})  # fmt: skip
    for uid, u in sorted(users.items()):
        n, a = u["name"], u["address"]
        text = (
            f"Customer {uid} is {n['first_name']} {n['last_name']}, living in {a['city']}, "
            f"{a['state']} ({a['zip']}). Email: {u['email']}."
        )
        docs.append({"id": f"user-{uid}", "title": f"Customer {uid}", "text": text})
    for pid, p in sorted(products.items()):
        prices = sorted({round(v["price"], 2) for v in p["variants"].values()})
        text = (
            f"The product {p['name']} (id {pid}) has {len(p['variants'])} variants, priced "
            f"from {prices[0]:.2f} to {prices[-1]:.2f} dollars."
        )
        docs.append({"id": f"product-{pid}", "title": f"Product {p['name']}", "text": text})
    qa: list[dict[str, Any]] = []
    order_ids = sorted(orders)
    for i, oid in enumerate(order_ids[: questions // 2]):
        o = orders[oid]
        if i % 2 == 0:
            qa.append({"id": f"status-{oid.lstrip('#')}", "hops": 1,
                       "question": f"What is the status of order {oid}?",
                       "answer": o["status"], "docs": [f"order-{oid.lstrip('#')}"]})  # fmt: skip
        else:
            city = users[o["user_id"]]["address"]["city"]
            qa.append({"id": f"city-{oid.lstrip('#')}", "hops": 2,
                       "question": f"In which city does the customer who placed order {oid} live?",
                       "answer": city,
                       "docs": [f"order-{oid.lstrip('#')}", f"user-{o['user_id']}"]})  # fmt: skip
    for pid, p in sorted(products.items())[: questions - len(qa)]:
        prices = sorted({round(v["price"], 2) for v in p["variants"].values()})
        qa.append({"id": f"price-{pid}", "hops": 1,
                   "question": f"What is the lowest price of the product {p['name']}, in dollars?",
                   "answer": f"{prices[0]:.2f}", "docs": [f"product-{pid}"]})  # fmt: skip
    (dest / "docs").mkdir(exist_ok=True)
    for name, rows in (("docs/retail.jsonl", docs), ("qa.jsonl", qa)):
        (dest / name).write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
        )
    return len(qa)
