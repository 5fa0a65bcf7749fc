"""A service whose answers move on between calls, as a live server's do (a clock kept outside
the environment's state): a recorded result of ``now`` never equals its replay, while ``echo``
replays exactly. For the tests of rows that fail verification; not part of the package."""

from __future__ import annotations

import itertools
from typing import Annotated, TypedDict

_TICKS = itertools.count(1)  # outside any environment: every call, in any process, moves it


class Tick(TypedDict):
    tick: Annotated[int, "The service's clock."]


class Echoed(TypedDict):
    text: Annotated[str, "The text sent."]


class LiveService:
    """A remote service: its clock, and an echo."""

    def now(self) -> Tick:
        """The service's current tick."""
        return {"tick": next(_TICKS)}

    def echo(self, text: Annotated[str, "Text to send back."]) -> Echoed:
        """Send the text back."""
        return {"text": text}
