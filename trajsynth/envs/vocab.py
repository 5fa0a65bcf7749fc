"""Vocabularies and number shapes for invented argument values, large enough that a student
has to copy a value from the request instead of recalling it.

A task's values end up in a request and in the gold call; a student trained on them learns
whatever they let it learn. Drawn from a dozen names and a dozen cities, the same values recur
hundreds of times in a training set, and a small model learns them as priors: measured on
BFCL, a 135M student wrote ``location="New York"`` for a request about Manhattan. Integers
were 1-5 and numbers uniform in 1-500, where people write 12,000, 2.5 and 1990. So:

1) names: the first and last names of PyPI ``faker``'s Latin-script locales (thousands; only
   plain ASCII-letter names, so a name reads the same in any tokenizer and request);
2) places: the cities of the machine's IANA time-zone database, the real-city lists ``faker``
   carries (India, Germany, Italy, the Netherlands; a few hundred of each), and US cities
   with their state as people write them ("Austin, TX");
3) companies: two of those last names, or one and a suffix ("Hahn & Weber", "Rossi Group");
4) phrases: two or three common English words (``faker``'s English word list, short
   function words left out) where nothing says what a string holds;
5) dates spread over four years (:func:`date_like`); integers and numbers as people write
   them (:func:`integer_like`, :func:`number_like`): a year where the name says year, small
   counts half the time, else tens, hundreds and thousands, round more often than not;
   decimals with one or two places, and rates below one; all within the schema's
   ``minimum`` / ``maximum``. A whole number is an ``int`` even where the schema says
   ``number``: JSON has one number type, people write "120", not "120.0", and a student that
   saw ``120.0`` wrote ``10000.0`` for BFCL's integer parameters (a type error there).

Every draw takes the caller's ``random.Random``, so a seeded run draws the same values; the
pools are built once per process, in a fixed order.
"""

from __future__ import annotations

import datetime as dt
import functools
import importlib
import math
import random
import re
from collections.abc import Mapping
from typing import Any

from ..core.jsonvalues import name_tokens

__all__ = [
    "company",
    "date_like",
    "first_name",
    "integer_like",
    "last_name",
    "number_like",
    "phrase",
    "place",
    "zones",
]

_LOCALES = (
    "en_US", "en_GB", "es_ES", "fr_FR", "de_DE", "it_IT", "pt_BR", "nl_NL", "sv_SE",
    "pl_PL", "en_IN", "tr_TR", "id_ID", "fi_FI", "da_DK", "cs_CZ",
)  # fmt: skip
_CITY_LOCALES = ("en_IN", "de_DE", "it_IT", "nl_NL")
_PER_LOCALE = 300  # cities kept from each real-city list (Italy's has 16,000 villages)
_NAME = re.compile(r"[A-Z][a-z]{2,}")
_WORD = re.compile(r"[a-z]{4,}")
_US_CITIES = (
    "Austin, TX", "Seattle, WA", "Boston, MA", "Chicago, IL", "San Diego, CA", "Denver, CO",
    "Portland, OR", "Miami, FL", "Atlanta, GA", "Phoenix, AZ", "Nashville, TN", "Dallas, TX",
    "Houston, TX", "San Francisco, CA", "Los Angeles, CA", "New York, NY", "Brooklyn, NY",
    "Philadelphia, PA", "Pittsburgh, PA", "Minneapolis, MN", "Detroit, MI", "Columbus, OH",
    "Cleveland, OH", "Kansas City, MO", "St. Louis, MO", "Salt Lake City, UT", "Las Vegas, NV",
    "Albuquerque, NM", "Tucson, AZ", "Raleigh, NC", "Charlotte, NC", "Orlando, FL",
    "Tampa, FL", "New Orleans, LA", "Baltimore, MD", "Madison, WI", "Milwaukee, WI",
    "Boise, ID", "Anchorage, AK", "Honolulu, HI", "Sacramento, CA", "San Jose, CA",
    "Buffalo, NY", "Omaha, NE", "Richmond, VA", "Louisville, KY", "Memphis, TN",
)  # fmt: skip
_REGIONS = ("America", "Europe", "Asia", "Africa", "Australia")
_COMPANY_SUFFIXES = ("Inc.", "LLC", "Group", "Ltd", "Labs", "Partners", "& Co.", "Holdings")
_ROUND = (
    20, 25, 30, 40, 50, 60, 75, 80, 100, 120, 150, 200, 250, 300, 400, 500, 600, 750, 800,
    1000, 1200, 1500, 2000, 2500, 3000, 5000, 7500, 10000, 12000, 15000, 20000, 25000,
    50000, 100000, 250000, 1000000, 1500000, 2000000, 5000000,
)  # fmt: skip


def _provider(kind: str, locale: str) -> Any:
    try:
        return importlib.import_module(f"faker.providers.{kind}.{locale}").Provider
    except Exception:  # faker absent or without this locale: the other sources remain
        return None


def _listed(provider: Any, *attrs: str) -> list[str]:
    out: list[str] = []
    for attr in attrs:
        values = getattr(provider, attr, None) or ()
        out.extend(str(v) for v in values)  # tuples, and dicts of name -> weight
    return out


@functools.cache
def _names() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Step 1: (first names, last names)."""
    first: dict[str, None] = dict.fromkeys(("Maria", "James", "Aisha", "Wei", "Priya", "Kwame"))
    last: dict[str, None] = dict.fromkeys(("Garcia", "Smith", "Khan", "Chen", "Patel", "Mensah"))
    for loc in _LOCALES:
        p = _provider("person", loc)
        if p is None:
            continue
        firsts = _listed(p, "first_names") or _listed(p, "first_names_male", "first_names_female")
        lasts = _listed(p, "last_names") or _listed(p, "last_names_male")
        first.update(dict.fromkeys(n for n in firsts if _NAME.fullmatch(n)))
        last.update(dict.fromkeys(n for n in lasts if _NAME.fullmatch(n)))
    return tuple(first), tuple(last)


@functools.cache
def zones() -> frozenset[str]:
    """The IANA zone names this machine knows (empty without a tz database)."""
    try:
        import zoneinfo

        return frozenset(zoneinfo.available_timezones())
    except Exception:
        return frozenset()


@functools.cache
def _zone_cities() -> tuple[str, ...]:
    out: dict[str, None] = {}
    for zone in sorted(zones()):
        region, _, city = zone.partition("/")
        if region in _REGIONS and city and "/" not in city and not re.search(r"\d|GMT", city):
            out[city.replace("_", " ")] = None
    return tuple(out)


@functools.cache
def _places() -> tuple[str, ...]:
    """Step 2."""
    out: dict[str, None] = dict.fromkeys(_US_CITIES + _zone_cities())
    for loc in _CITY_LOCALES:
        # sorted: faker builds it_IT's list from a set, in another order in every process
        cities = sorted(c for c in _listed(_provider("address", loc), "cities") if c.isascii())
        step = max(1, len(cities) // _PER_LOCALE)
        out.update(dict.fromkeys(cities[::step][:_PER_LOCALE]))
    return tuple(out)


@functools.cache
def _words() -> tuple[str, ...]:
    """Step 4."""
    words = _listed(_provider("lorem", "en_US"), "word_list")
    kept = tuple(dict.fromkeys(w for w in words if _WORD.fullmatch(w)))
    return kept or ("harbor", "maple", "orbit", "cedar", "summit", "river", "lantern", "meadow")


def first_name(rng: random.Random) -> str:
    return rng.choice(_names()[0])


def last_name(rng: random.Random) -> str:
    return rng.choice(_names()[1])


def place(rng: random.Random, known: tuple[str, ...] = ()) -> str:
    """Step 2: half the time a well-known city (``known``, the US list, the zone database's),
    else any."""
    if rng.random() < 0.5:
        return rng.choice(known + _US_CITIES + _zone_cities())
    return rng.choice(_places())


def company(rng: random.Random) -> str:
    """Step 3."""
    a, b = last_name(rng), last_name(rng)
    shape = rng.randrange(4)
    if shape == 0:
        return f"{a} & {b}"
    if shape == 1:
        return f"{a}-{b}"
    return f"{a} {rng.choice(_COMPANY_SUFFIXES)}"


def phrase(rng: random.Random, n: int | None = None) -> str:
    """Step 4: ``n`` (else two or three) distinct English words."""
    words = _words()
    return " ".join(rng.sample(words, n or rng.choice((2, 2, 3))))


def date_like(rng: random.Random) -> str:
    """A day of 2024-2027 as ISO ``YYYY-MM-DD`` (one fixed date stood in for every date a
    state did not hold: 99 of 3,000 training values)."""
    day = dt.date(2024, 1, 1) + dt.timedelta(days=rng.randrange(4 * 365))
    return day.isoformat()


def _bounds(schema: Mapping[str, Any], step: float) -> tuple[float | None, float | None]:
    """(lowest, highest) allowed; an exclusive bound moves in by ``step``."""

    def num(key: str) -> float | None:
        v = schema.get(key)
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    lo, hi, ex_lo, ex_hi = (
        num("minimum"),
        num("maximum"),
        num("exclusiveMinimum"),
        num("exclusiveMaximum"),
    )
    if ex_lo is not None:
        lo = ex_lo + step if lo is None else max(lo, ex_lo + step)
    if ex_hi is not None:
        hi = ex_hi - step if hi is None else min(hi, ex_hi - step)
    return lo, hi


def _within(value: Any, lo: Any, hi: Any, draw: Any) -> Any:
    """``value`` where it lies within [``lo``, ``hi``] (either may be None), else the bound it
    passed when there is one bound, else ``draw(lo, hi)``."""
    if (lo is None or value >= lo) and (hi is None or value <= hi):
        return value
    if lo is None or hi is None:
        bound = lo if lo is not None else hi
        return draw(bound, bound)  # the bound (drawn, so that the draws after it stay put)
    return draw(lo, hi) if lo <= hi else lo


def integer_like(param: str, schema: Mapping[str, Any], rng: random.Random) -> int:
    """Step 5 for integers."""
    lo, hi = _bounds(schema, 1)
    toks = set(name_tokens(param))
    if toks & {"year", "yr"} and lo is None and hi is None:
        return rng.randint(1950, 2030)
    r = rng.random()
    if r < 0.5:
        value = rng.randint(1, 10)
    elif r < 0.75:
        value = rng.randint(11, 99)
    elif r < 0.95:
        value = rng.choice(_ROUND)
    else:
        value = rng.randint(100, 9999)
    lo_i = math.ceil(lo) if lo is not None else None
    hi_i = math.floor(hi) if hi is not None else None
    return int(_within(value, lo_i, hi_i, rng.randint))


def number_like(param: str, schema: Mapping[str, Any], rng: random.Random) -> int | float:
    """Step 5 for numbers: a whole one as an ``int``."""
    lo, hi = _bounds(schema, 0.01)
    r = rng.random()
    if r < 0.25:
        value = round(rng.uniform(0.5, 20), 1)
    elif r < 0.5:
        value = round(rng.uniform(1, 1000), 2)
    elif r < 0.7:
        value = round(rng.uniform(0.01, 0.99), 2)
    else:
        value = float(rng.choice(_ROUND))
    value = float(_within(value, lo, hi, lambda a, b: min(b, max(a, round(rng.uniform(a, b), 2)))))
    return int(value) if value.is_integer() else value
