"""A small stateful API class written the way BFCL's multi-turn classes are (state in
attributes, ``_load_scenario``, ``{"error": ...}`` on refusal), for the ``code`` environment's
tests. Not part of the package."""

from __future__ import annotations

from typing import Annotated, TypedDict


class BookRef(TypedDict):
    book_id: Annotated[str, "Id of the book; pass it to lend_book or get_book."]
    title: Annotated[str, "Title."]


class Found(TypedDict):
    books: Annotated[list[BookRef], "Books by that author."]


class Book(TypedDict):
    book_id: Annotated[str, "Id of the book."]
    title: Annotated[str, "Title."]
    author: Annotated[str, "Author."]
    on_loan_to: Annotated[str, "Member id holding it, or empty."]


class Loan(TypedDict):
    book_id: Annotated[str, "The book lent."]
    member_id: Annotated[str, "The member who has it."]


class Library:
    """A lending library: books, members, loans."""

    def __init__(self) -> None:
        self.books: dict[str, dict] = {
            "b1": {"book_id": "b1", "title": "Dune", "author": "Frank Herbert", "on_loan_to": ""},
            "b2": {"book_id": "b2", "title": "Emma", "author": "Jane Austen", "on_loan_to": ""},
            "b3": {"book_id": "b3", "title": "Persuasion", "author": "Jane Austen",
                   "on_loan_to": ""},
        }  # fmt: skip
        self.members: dict[str, dict] = {
            "m1": {"member_id": "m1", "name": "Ada"},
            "m2": {"member_id": "m2", "name": "Linus"},
        }
        self._next = 4

    def _load_scenario(self, config: dict) -> None:
        self.books.update(config.get("books", {}))
        self.members.update(config.get("members", {}))

    def add_book(
        self, title: Annotated[str, "Title."], author: Annotated[str, "Author's full name."]
    ) -> BookRef:
        """Add a book to the catalogue."""
        book_id = f"b{self._next}"
        self._next += 1
        self.books[book_id] = {"book_id": book_id, "title": title, "author": author,
                               "on_loan_to": ""}  # fmt: skip
        return {"book_id": book_id, "title": title}

    def find_books(self, author: Annotated[str, "Author's full name."]) -> Found:
        """Books by one author."""
        hits = [b for b in self.books.values() if b["author"] == author]
        return {"books": [{"book_id": b["book_id"], "title": b["title"]} for b in hits]}

    def get_book(self, book_id: Annotated[str, "Id of the book."]) -> Book:
        """One book's details."""
        if book_id not in self.books:
            return {"error": f"no book {book_id}"}  # type: ignore[return-value]
        return dict(self.books[book_id])  # type: ignore[return-value]

    def lend_book(
        self,
        book_id: Annotated[str, "Id of the book."],
        member_id: Annotated[str, "Id of the member."],
    ) -> Loan:
        """Lend a book to a member."""
        book = self.books.get(book_id)
        if book is None or member_id not in self.members:
            return {"error": "unknown book or member"}  # type: ignore[return-value]
        if book["on_loan_to"]:
            return {"error": f"{book_id} is already on loan"}  # type: ignore[return-value]
        self.books[book_id] = {**book, "on_loan_to": member_id}
        return {"book_id": book_id, "member_id": member_id}

    def return_book(self, book_id: Annotated[str, "Id of the book."]) -> Loan:
        """Take a lent book back."""
        book = self.books.get(book_id)
        if book is None or not book["on_loan_to"]:
            return {"error": f"{book_id} is not on loan"}  # type: ignore[return-value]
        self.books[book_id] = {**book, "on_loan_to": ""}
        return {"book_id": book_id, "member_id": book["on_loan_to"]}
