"""Travel: flights, hotels, bookings, payment methods and currency conversion.

State tables: ``meta`` (the fixed date), ``airports``, ``users`` (with payment methods),
``flights`` (per-cabin prices and seats), ``hotels`` (nightly rate, rooms left), ``bookings``
and ``rates`` (USD value of one unit of each currency). A fixed core of records (the ones
the example tasks use: a sold-out red-eye, a gift card with a small balance, an existing
booking) is the same for every seed; the seed adds bulk flights, hotels and users on
routes and dates the core does not use, so every seed keeps the examples valid.

Failure modes: unknown airport, flight, hotel, user, payment method or booking
(``not_found``); sold-out cabin or fully booked hotel (``unavailable``); a gift card whose
balance does not cover the total (``limit_exceeded``); a date before today or a route to the
same airport (``invalid_value``); cancelling a cancelled booking or a departed flight
(``conflict``).

Data flow (for the function-signature graph): find_user → user_id → get_user → payment_id;
find_airports → code → search_flights → flight_id → get_flight / book_flight → booking_id →
get_booking / cancel_booking; search_hotels → hotel_id → book_hotel; total_usd →
convert_currency.amount.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal, TypedDict, cast

from ..domain import Domain
from ..state import State
from ..tasks import call, ref, task, turn
from ..tools import ToolError, tool
from ._common import fmt_time, get_or_fail, money, new_id, parse_date, rng_for, today

TODAY = "2025-06-20"

AIRPORTS = {
    "SFO": ("San Francisco", "US"),
    "JFK": ("New York", "US"),
    "LGA": ("New York", "US"),
    "LAX": ("Los Angeles", "US"),
    "ORD": ("Chicago", "US"),
    "SEA": ("Seattle", "US"),
    "BOS": ("Boston", "US"),
    "MIA": ("Miami", "US"),
    "DEN": ("Denver", "US"),
    "AUS": ("Austin", "US"),
    "LHR": ("London", "GB"),
    "CDG": ("Paris", "FR"),
    "FRA": ("Frankfurt", "DE"),
    "NRT": ("Tokyo", "JP"),
}
AIRLINES = {"SW": "Skyway", "AT": "Atlas Air", "BJ": "Bluejet"}
RATES = {
    "USD": 1.0,
    "EUR": 1.08,
    "GBP": 1.27,
    "JPY": 0.0067,
    "CAD": 0.73,
    "CHF": 1.12,
    "AUD": 0.66,
    "MXN": 0.058,
}


def _flight(fid, origin, dest, date, dep, dur, stops, eco, bus, seats_eco, seats_bus):
    return {
        "flight_id": fid,
        "airline": AIRLINES[fid[:2]],
        "origin": origin,
        "destination": dest,
        "date": date,
        "depart_minute": dep,
        "duration_minutes": dur,
        "stops": stops,
        "prices_usd": {"economy": float(eco), "business": float(bus)},
        "seats_left": {"economy": seats_eco, "business": seats_bus},
    }


CORE_FLIGHTS = [
    _flight("SW101", "SFO", "JFK", "2025-07-01", 8 * 60, 330, 0, 289, 899, 12, 4),
    _flight("AT230", "SFO", "JFK", "2025-07-01", 11 * 60 + 15, 410, 1, 219, 650, 3, 0),
    _flight("BJ404", "SFO", "JFK", "2025-07-01", 22 * 60 + 30, 325, 0, 199, 720, 0, 2),
    _flight("SW102", "JFK", "SFO", "2025-07-05", 9 * 60, 390, 0, 305, 920, 20, 6),
    _flight("AT510", "JFK", "SFO", "2025-07-05", 17 * 60 + 45, 395, 0, 259, 610, 0, 5),
    _flight("BJ777", "SEA", "LHR", "2025-07-02", 13 * 60, 580, 0, 780, 2900, 8, 2),
    _flight("SW330", "BOS", "MIA", "2025-07-03", 7 * 60 + 10, 205, 0, 159, 480, 30, 8),
    _flight("AT331", "BOS", "MIA", "2025-07-03", 15 * 60, 200, 0, 139, 455, 1, 0),
    _flight("SW640", "LAX", "ORD", "2025-07-02", 6 * 60, 250, 0, 179, 540, 9, 3),
    _flight("SW050", "SFO", "SEA", "2025-06-10", 7 * 60, 125, 0, 99, 310, 40, 10),
]
CORE_HOTELS = [
    ("HT-NY01", "Hudson Loft", "New York", 4, 289.0, 5),
    ("HT-NY02", "Midtown Budget Inn", "New York", 2, 129.0, 0),
    ("HT-NY03", "Grand Central Suites", "New York", 5, 459.0, 2),
    ("HT-LD01", "Thames View", "London", 4, 240.0, 6),
    ("HT-MI01", "Ocean Drive Hotel", "Miami", 3, 175.0, 9),
]
CORE_USERS: list[dict[str, Any]] = [
    {
        "user_id": "mia_chen",
        "name": "Mia Chen",
        "email": "mia.chen@example.com",
        "home_airport": "SFO",
        "membership": "gold",
        "payment_methods": [
            {"payment_id": "card_mc_4421", "kind": "credit_card", "balance_usd": None},
            {"payment_id": "gift_mc_01", "kind": "gift_card", "balance_usd": 150.0},
        ],
    },
    {
        "user_id": "omar_haddad",
        "name": "Omar Haddad",
        "email": "omar.h@example.net",
        "home_airport": "BOS",
        "membership": "silver",
        "payment_methods": [
            {"payment_id": "card_oh_9012", "kind": "credit_card", "balance_usd": None}
        ],
    },
    {
        "user_id": "lena_vogel",
        "name": "Lena Vogel",
        "email": "lena.vogel@example.org",
        "home_airport": "SEA",
        "membership": "regular",
        "payment_methods": [
            {"payment_id": "card_lv_3307", "kind": "credit_card", "balance_usd": None},
            {"payment_id": "gift_lv_77", "kind": "gift_card", "balance_usd": 40.0},
        ],
    },
]
CORE_BOOKINGS = [
    {
        "booking_id": "BK-OH0001",
        "user_id": "omar_haddad",
        "kind": "flight",
        "flight_id": "SW330",
        "hotel_id": None,
        "cabin": "economy",
        "passengers": 1,
        "check_in": None,
        "nights": None,
        "rooms": None,
        "total_usd": 159.0,
        "payment_id": "card_oh_9012",
        "status": "confirmed",
    },
]
_CORE_SLOTS = {(f["origin"], f["destination"], f["date"]) for f in CORE_FLIGHTS}
_FIRST = ["Ana", "Ben", "Chloe", "Dev", "Eli", "Fatima", "Gus", "Hana", "Ivan", "June", "Kofi"]
_LAST = ["Garcia", "Smith", "Okafor", "Kim", "Rossi", "Nguyen", "Patel", "Berg", "Silva"]
_HOTEL_WORDS = ["Harbor", "Park", "Central", "Garden", "Summit", "Riverside", "Plaza", "Union"]


def build_state(seed: int) -> dict[str, dict]:
    """The core records plus seeded bulk data (module docstring)."""
    rng = rng_for("travel", seed)
    flights = {f["flight_id"]: f for f in CORE_FLIGHTS}
    codes = sorted(AIRPORTS)
    dates = [(dt.date(2025, 7, 1) + dt.timedelta(days=d)).isoformat() for d in range(14)]
    while len(flights) < len(CORE_FLIGHTS) + 150:
        o, d = rng.sample(codes, 2)
        date = rng.choice(dates)
        if (o, d, date) in _CORE_SLOTS:
            continue
        fid = rng.choice(list(AIRLINES)) + str(rng.randint(600, 999))
        if fid in flights:
            continue
        eco = rng.randrange(89, 900, 5)
        flights[fid] = _flight(
            fid,
            o,
            d,
            date,
            rng.randrange(5 * 60, 23 * 60, 5),
            rng.randrange(70, 700, 5),
            rng.choice([0, 0, 1, 2]),
            eco,
            eco * 3,
            rng.choice([0, 2, 7, 15, 40]),
            rng.choice([0, 1, 4, 9]),
        )
    hotels = {
        h[0]: dict(
            zip(
                ("hotel_id", "name", "city", "stars", "nightly_rate_usd", "rooms_left"),
                h,
                strict=True,
            )
        )
        for h in CORE_HOTELS
    }
    cities = sorted({c for c, _ in AIRPORTS.values()})
    for i in range(30):
        city = rng.choice(cities)
        hid = f"HT-{city[:2].upper()}{50 + i:02d}"
        hotels[hid] = {
            "hotel_id": hid,
            "name": f"{rng.choice(_HOTEL_WORDS)} {rng.choice(['Inn', 'Hotel', 'Suites'])} {city}",
            "city": city,
            "stars": rng.randint(1, 5),
            "nightly_rate_usd": float(rng.randrange(70, 600, 5)),
            "rooms_left": rng.choice([0, 1, 3, 8, 20]),
        }
    users = {u["user_id"]: u for u in CORE_USERS}
    for i in range(25):
        first, last = rng.choice(_FIRST), rng.choice(_LAST)
        uid = f"{first.lower()}_{last.lower()}_{100 + i}"
        users[uid] = {
            "user_id": uid,
            "name": f"{first} {last}",
            "email": f"{first.lower()}.{last.lower()}{100 + i}@example.com",
            "home_airport": rng.choice(codes),
            "membership": rng.choice(["regular", "silver", "gold"]),
            "payment_methods": [
                {"payment_id": f"card_{uid}", "kind": "credit_card", "balance_usd": None}
            ],
        }
    return {
        "meta": {"clock": {"today": TODAY}},
        "airports": {c: {"code": c, "city": v[0], "country": v[1]} for c, v in AIRPORTS.items()},
        "flights": flights,
        "hotels": hotels,
        "users": users,
        "bookings": {b["booking_id"]: b for b in CORE_BOOKINGS},
        "rates": {c: {"currency": c, "usd_per_unit": r} for c, r in RATES.items()},
    }


# --------------------------------------------------------------------------------------
# response types
# --------------------------------------------------------------------------------------


class Airport(TypedDict):
    code: Annotated[str, "IATA airport code, e.g. 'JFK'; use as origin or destination."]
    city: Annotated[str, "City the airport serves."]
    country: Annotated[str, "ISO country code."]


class AirportList(TypedDict):
    airports: Annotated[list[Airport], "Airports matching the city."]


class FlightOption(TypedDict):
    flight_id: Annotated[str, "Flight id, e.g. 'SW101'; pass it to get_flight or book_flight."]
    airline: Annotated[str, "Operating airline."]
    origin: Annotated[str, "IATA code of the departure airport."]
    destination: Annotated[str, "IATA code of the arrival airport."]
    date: Annotated[str, "Departure date, YYYY-MM-DD."]
    depart_time: Annotated[str, "Local departure time, HH:MM."]
    arrive_time: Annotated[str, "Local arrival time, HH:MM (may be the next day)."]
    stops: Annotated[int, "Number of stops (0 = nonstop)."]
    cabin: Annotated[str, "Cabin the price and seats refer to."]
    price_usd: Annotated[float, "Price per passenger in USD."]
    seats_left: Annotated[int, "Seats still for sale in this cabin (0 = sold out)."]


class FlightSearch(TypedDict):
    flights: Annotated[list[FlightOption], "Matching flights, sorted as requested."]
    count: Annotated[int, "Number of matching flights."]


class FlightDetails(TypedDict):
    flight_id: Annotated[str, "Flight id."]
    airline: Annotated[str, "Operating airline."]
    origin: Annotated[str, "IATA code of the departure airport."]
    destination: Annotated[str, "IATA code of the arrival airport."]
    date: Annotated[str, "Departure date, YYYY-MM-DD."]
    depart_time: Annotated[str, "Departure time, HH:MM."]
    duration_minutes: Annotated[int, "Flight time in minutes."]
    stops: Annotated[int, "Number of stops."]
    prices_usd: Annotated[dict[str, float], "Price per passenger by cabin (economy, business)."]
    seats_left: Annotated[dict[str, int], "Seats left by cabin."]


class Booking(TypedDict):
    booking_id: Annotated[str, "Booking id, e.g. 'BK-1A2B3C'; pass it to get_booking or cancel."]
    user_id: Annotated[str, "Traveller who owns the booking."]
    kind: Annotated[Literal["flight", "hotel"], "What was booked."]
    flight_id: Annotated[str | None, "Booked flight (flight bookings)."]
    hotel_id: Annotated[str | None, "Booked hotel (hotel bookings)."]
    cabin: Annotated[str | None, "Cabin (flight bookings)."]
    passengers: Annotated[int, "Passengers (flights) or guests count."]
    check_in: Annotated[str | None, "Check-in date (hotel bookings)."]
    nights: Annotated[int | None, "Nights (hotel bookings)."]
    rooms: Annotated[int | None, "Rooms (hotel bookings)."]
    total_usd: Annotated[float, "Total charged in USD."]
    payment_id: Annotated[str, "Payment method charged."]
    status: Annotated[Literal["confirmed", "cancelled"], "Booking status."]


class BookingList(TypedDict):
    bookings: Annotated[list[Booking], "The user's bookings."]


class Cancellation(TypedDict):
    booking_id: Annotated[str, "The cancelled booking."]
    status: Annotated[str, "New status ('cancelled')."]
    refund_usd: Annotated[float, "Amount refunded in USD."]
    refunded_to: Annotated[str, "Payment method the refund went to."]


class HotelOption(TypedDict):
    hotel_id: Annotated[str, "Hotel id, e.g. 'HT-NY01'; pass it to book_hotel."]
    name: Annotated[str, "Hotel name."]
    city: Annotated[str, "City."]
    stars: Annotated[int, "Star rating 1-5."]
    nightly_rate_usd: Annotated[float, "Price per room per night in USD."]
    rooms_left: Annotated[int, "Rooms still available (0 = fully booked)."]
    total_usd: Annotated[float, "Price for the requested nights, one room, in USD."]


class HotelSearch(TypedDict):
    hotels: Annotated[list[HotelOption], "Matching hotels, cheapest first."]
    count: Annotated[int, "Number of matching hotels."]


class Conversion(TypedDict):
    amount: Annotated[float, "Amount in the source currency."]
    from_currency: Annotated[str, "Source currency code."]
    to_currency: Annotated[str, "Target currency code."]
    rate: Annotated[float, "Units of to_currency per unit of from_currency."]
    converted_amount: Annotated[float, "The amount in the target currency, 2 decimals."]


class UserRef(TypedDict):
    user_id: Annotated[str, "Traveller id, e.g. 'mia_chen'; pass it to get_user or book_*."]
    name: Annotated[str, "Full name."]


class PaymentMethod(TypedDict):
    payment_id: Annotated[str, "Payment method id; pass it as payment_id when booking."]
    kind: Annotated[Literal["credit_card", "gift_card"], "Kind of payment method."]
    balance_usd: Annotated[float | None, "Remaining balance (gift cards), null for cards."]


class UserProfile(TypedDict):
    user_id: Annotated[str, "Traveller id."]
    name: Annotated[str, "Full name."]
    email: Annotated[str, "Email address."]
    home_airport: Annotated[str, "IATA code of the home airport."]
    membership: Annotated[Literal["regular", "silver", "gold"], "Loyalty tier."]
    payment_methods: Annotated[list[PaymentMethod], "Payment methods on file."]


# --------------------------------------------------------------------------------------
# tools
# --------------------------------------------------------------------------------------

Cabin = Literal["economy", "business"]


def _airport(db: State, code: str, field: str) -> str:
    code = code.upper()
    if not db.has("airports", code):
        raise ToolError("not_found", f"{field} airport {code!r} not found")
    return code


def _option(f: dict, cabin: str) -> FlightOption:
    return {
        "flight_id": f["flight_id"],
        "airline": f["airline"],
        "origin": f["origin"],
        "destination": f["destination"],
        "date": f["date"],
        "depart_time": fmt_time(f["depart_minute"]),
        "arrive_time": fmt_time(f["depart_minute"] + f["duration_minutes"]),
        "stops": f["stops"],
        "cabin": cabin,
        "price_usd": f["prices_usd"][cabin],
        "seats_left": f["seats_left"][cabin],
    }


def _payment(db: State, user: dict, payment_id: str) -> dict:
    for pm in user["payment_methods"]:
        if pm["payment_id"] == payment_id:
            return pm
    raise ToolError(
        "not_found", f"payment method {payment_id!r} is not on file for {user['user_id']}"
    )


def _charge(db: State, user: dict, payment_id: str, amount: float) -> None:
    pm = _payment(db, user, payment_id)
    if pm["kind"] == "gift_card":
        if pm["balance_usd"] < amount:
            raise ToolError(
                "limit_exceeded",
                f"gift card {payment_id} has {pm['balance_usd']:.2f} USD, "
                f"the total is {amount:.2f} USD",
            )
        _set_balance(db, user, payment_id, money(pm["balance_usd"] - amount))


def _set_balance(db: State, user: dict, payment_id: str, balance: float) -> None:
    methods = [
        {**pm, "balance_usd": balance} if pm["payment_id"] == payment_id else pm
        for pm in user["payment_methods"]
    ]
    db.update("users", user["user_id"], payment_methods=methods)


@tool()
def find_airports(
    db: State, city: Annotated[str, "City name, e.g. 'New York' (case-insensitive)."]
) -> AirportList:
    """Find the airports that serve a city."""
    want = city.strip().lower()
    found = [
        cast(Airport, dict(a)) for _, a in db.rows("airports") if want and want in a["city"].lower()
    ]
    if not found:
        raise ToolError("not_found", f"no airport serves {city!r}")
    return {"airports": sorted(found, key=lambda a: a["code"])}


@tool()
def search_flights(
    db: State,
    origin: Annotated[str, "IATA code of the departure airport, e.g. 'SFO'."],
    destination: Annotated[str, "IATA code of the arrival airport, e.g. 'JFK'."],
    date: Annotated[str, "Departure date, YYYY-MM-DD."],
    cabin: Annotated[Cabin, "Cabin to price."] = "economy",
    max_price: Annotated[float | None, "Only flights at or below this price (USD)."] = None,
    nonstop_only: Annotated[bool, "Only nonstop flights."] = False,
    sort_by: Annotated[Literal["price", "departure", "duration"], "Sort order."] = "price",
) -> FlightSearch:
    """Search flights between two airports on a date (sold-out flights show 0 seats)."""
    o, d = _airport(db, origin, "origin"), _airport(db, destination, "destination")
    if o == d:
        raise ToolError("invalid_value", "origin and destination are the same airport")
    parse_date(date, "date")
    found = [
        f
        for _, f in db.rows("flights")
        if f["origin"] == o
        and f["destination"] == d
        and f["date"] == date
        and (max_price is None or f["prices_usd"][cabin] <= max_price)
        and (not nonstop_only or f["stops"] == 0)
    ]
    key = {
        "price": lambda f: (f["prices_usd"][cabin], f["flight_id"]),
        "departure": lambda f: (f["depart_minute"], f["flight_id"]),
        "duration": lambda f: (f["duration_minutes"], f["flight_id"]),
    }[sort_by]
    options = [_option(f, cabin) for f in sorted(found, key=key)]
    return {"flights": options, "count": len(options)}


@tool()
def get_flight(
    db: State, flight_id: Annotated[str, "Flight id from search_flights, e.g. 'SW101'."]
) -> FlightDetails:
    """Get a flight's schedule, prices and seats left in every cabin."""
    f = get_or_fail(db, "flights", flight_id, "flight")
    return {
        "flight_id": f["flight_id"],
        "airline": f["airline"],
        "origin": f["origin"],
        "destination": f["destination"],
        "date": f["date"],
        "depart_time": fmt_time(f["depart_minute"]),
        "duration_minutes": f["duration_minutes"],
        "stops": f["stops"],
        "prices_usd": dict(f["prices_usd"]),
        "seats_left": dict(f["seats_left"]),
    }


@tool(writes=True)
def book_flight(
    db: State,
    user_id: Annotated[str, "Traveller id from find_user."],
    flight_id: Annotated[str, "Flight id from search_flights."],
    payment_id: Annotated[str, "Payment method id from get_user."],
    cabin: Annotated[Cabin, "Cabin to book."] = "economy",
    passengers: Annotated[int, "Number of passengers.", {"minimum": 1, "maximum": 9}] = 1,
) -> Booking:
    """Book seats on a flight for a traveller and charge a payment method."""
    user = get_or_fail(db, "users", user_id, "user")
    f = get_or_fail(db, "flights", flight_id, "flight")
    if parse_date(f["date"], "date") < today(db):
        raise ToolError("invalid_value", f"flight {flight_id} departed on {f['date']}")
    left = f["seats_left"][cabin]
    if left < passengers:
        what = "sold out" if left == 0 else f"has only {left} seat(s) left"
        raise ToolError("unavailable", f"{cabin} on {flight_id} is {what}")
    total = money(f["prices_usd"][cabin] * passengers)
    _charge(db, user, payment_id, total)
    db.update("flights", flight_id, seats_left={**f["seats_left"], cabin: left - passengers})
    bid = new_id(db, "bookings", "BK-", user_id, flight_id, cabin, passengers)
    booking: Booking = {
        "booking_id": bid,
        "user_id": user_id,
        "kind": "flight",
        "flight_id": flight_id,
        "hotel_id": None,
        "cabin": cabin,
        "passengers": passengers,
        "check_in": None,
        "nights": None,
        "rooms": None,
        "total_usd": total,
        "payment_id": payment_id,
        "status": "confirmed",
    }
    db.put("bookings", bid, booking)
    return cast(Booking, dict(booking))


@tool()
def get_booking(db: State, booking_id: Annotated[str, "Booking id, e.g. 'BK-1A2B3C'."]) -> Booking:
    """Get one booking."""
    return cast(Booking, dict(get_or_fail(db, "bookings", booking_id, "booking")))


@tool()
def list_bookings(
    db: State,
    user_id: Annotated[str, "Traveller id."],
    status: Annotated[Literal["confirmed", "cancelled", "all"], "Which bookings."] = "confirmed",
) -> BookingList:
    """List a traveller's bookings."""
    get_or_fail(db, "users", user_id, "user")
    found = [
        cast(Booking, dict(b))
        for _, b in sorted(db.rows("bookings"))
        if b["user_id"] == user_id and (status == "all" or b["status"] == status)
    ]
    return {"bookings": found}


@tool(writes=True)
def cancel_booking(
    db: State,
    booking_id: Annotated[str, "Booking id to cancel."],
    reason: Annotated[
        Literal["change_of_plans", "found_better_option", "medical", "other"], "Why."
    ] = "change_of_plans",
) -> Cancellation:
    """Cancel a booking; seats or rooms are released and the payment refunded."""
    b = get_or_fail(db, "bookings", booking_id, "booking")
    if b["status"] == "cancelled":
        raise ToolError("conflict", f"booking {booking_id} is already cancelled")
    user = get_or_fail(db, "users", b["user_id"], "user")
    if b["kind"] == "flight":
        f = get_or_fail(db, "flights", b["flight_id"], "flight")
        if parse_date(f["date"], "date") < today(db):
            raise ToolError("conflict", f"flight {f['flight_id']} has already departed")
        seats = {**f["seats_left"], b["cabin"]: f["seats_left"][b["cabin"]] + b["passengers"]}
        db.update("flights", f["flight_id"], seats_left=seats)
    else:
        h = get_or_fail(db, "hotels", b["hotel_id"], "hotel")
        db.update("hotels", h["hotel_id"], rooms_left=h["rooms_left"] + b["rooms"])
    pm = _payment(db, user, b["payment_id"])
    if pm["kind"] == "gift_card":
        _set_balance(db, user, pm["payment_id"], money(pm["balance_usd"] + b["total_usd"]))
    db.update("bookings", booking_id, status="cancelled", cancel_reason=reason)
    return {
        "booking_id": booking_id,
        "status": "cancelled",
        "refund_usd": b["total_usd"],
        "refunded_to": b["payment_id"],
    }


@tool()
def search_hotels(
    db: State,
    city: Annotated[str, "City name, e.g. 'New York'."],
    check_in: Annotated[str, "Check-in date, YYYY-MM-DD."],
    nights: Annotated[int, "Number of nights.", {"minimum": 1, "maximum": 30}],
    min_stars: Annotated[int, "Lowest star rating.", {"minimum": 1, "maximum": 5}] = 1,
    max_nightly_rate: Annotated[float | None, "Highest nightly rate in USD."] = None,
) -> HotelSearch:
    """Search hotels in a city (fully booked hotels show 0 rooms left)."""
    parse_date(check_in, "check_in")
    want = city.strip().lower()
    found = sorted(
        (
            h
            for _, h in db.rows("hotels")
            if h["city"].lower() == want
            and h["stars"] >= min_stars
            and (max_nightly_rate is None or h["nightly_rate_usd"] <= max_nightly_rate)
        ),
        key=lambda h: (h["nightly_rate_usd"], h["hotel_id"]),
    )
    options = [
        cast(HotelOption, {**h, "total_usd": money(h["nightly_rate_usd"] * nights)}) for h in found
    ]
    return {"hotels": options, "count": len(options)}


@tool(writes=True)
def book_hotel(
    db: State,
    user_id: Annotated[str, "Traveller id."],
    hotel_id: Annotated[str, "Hotel id from search_hotels."],
    check_in: Annotated[str, "Check-in date, YYYY-MM-DD."],
    nights: Annotated[int, "Number of nights.", {"minimum": 1, "maximum": 30}],
    payment_id: Annotated[str, "Payment method id from get_user."],
    rooms: Annotated[int, "Rooms to book.", {"minimum": 1, "maximum": 5}] = 1,
) -> Booking:
    """Book hotel rooms for a traveller and charge a payment method."""
    user = get_or_fail(db, "users", user_id, "user")
    h = get_or_fail(db, "hotels", hotel_id, "hotel")
    if parse_date(check_in, "check_in") < today(db):
        raise ToolError("invalid_value", f"check_in {check_in} is in the past")
    if h["rooms_left"] < rooms:
        raise ToolError("unavailable", f"{h['name']} has {h['rooms_left']} room(s) left")
    total = money(h["nightly_rate_usd"] * nights * rooms)
    _charge(db, user, payment_id, total)
    db.update("hotels", hotel_id, rooms_left=h["rooms_left"] - rooms)
    bid = new_id(db, "bookings", "BK-", user_id, hotel_id, check_in, nights, rooms)
    booking: Booking = {
        "booking_id": bid,
        "user_id": user_id,
        "kind": "hotel",
        "flight_id": None,
        "hotel_id": hotel_id,
        "cabin": None,
        "passengers": rooms * 2,
        "check_in": check_in,
        "nights": nights,
        "rooms": rooms,
        "total_usd": total,
        "payment_id": payment_id,
        "status": "confirmed",
    }
    db.put("bookings", bid, booking)
    return cast(Booking, dict(booking))


@tool()
def convert_currency(
    db: State,
    amount: Annotated[float, "Amount to convert."],
    from_currency: Annotated[str, "ISO code of the source currency, e.g. 'USD'."],
    to_currency: Annotated[str, "ISO code of the target currency, e.g. 'EUR'."],
) -> Conversion:
    """Convert an amount between currencies at today's rate."""
    src = get_or_fail(db, "rates", from_currency.upper(), "currency")
    dst = get_or_fail(db, "rates", to_currency.upper(), "currency")
    rate = src["usd_per_unit"] / dst["usd_per_unit"]
    return {
        "amount": amount,
        "from_currency": src["currency"],
        "to_currency": dst["currency"],
        "rate": round(rate, 6),
        "converted_amount": money(amount * rate),
    }


@tool()
def find_user(db: State, email: Annotated[str, "The traveller's email address."]) -> UserRef:
    """Find a traveller by email."""
    want = email.strip().lower()
    for uid, u in db.rows("users"):
        if u["email"].lower() == want:
            return {"user_id": uid, "name": u["name"]}
    raise ToolError("not_found", f"no traveller with email {email!r}")


@tool()
def get_user(db: State, user_id: Annotated[str, "Traveller id from find_user."]) -> UserProfile:
    """Get a traveller's profile and payment methods."""
    u = get_or_fail(db, "users", user_id, "user")
    return cast(UserProfile, {**u, "payment_methods": [dict(pm) for pm in u["payment_methods"]]})


TOOLS = [
    find_airports,
    search_flights,
    get_flight,
    book_flight,
    get_booking,
    list_bookings,
    cancel_booking,
    search_hotels,
    book_hotel,
    convert_currency,
    find_user,
    get_user,
]


# --------------------------------------------------------------------------------------
# example tasks
# --------------------------------------------------------------------------------------


# fmt: off
def authored_tasks() -> list:
    return [
        task(
            "travel-convert",
            ["single_call"],
            turn(
                "How much is 250 euros in US dollars?",
                call("convert_currency", amount=250, from_currency="EUR", to_currency="USD"),
            ),
            required_outputs=[ref("c0.converted_amount")],
        ),
        task(
            "travel-book-cheapest-nonstop",
            ["dependent_calls", "optional_params", "multi_call"],
            turn(
                "I'm mia.chen@example.com. Book me the cheapest nonstop economy flight from SFO "
                "to JFK on 2025-07-01 that still has seats, on my credit card.",
                call("find_user", email="mia.chen@example.com"),
                call(
                    "search_flights",
                    origin="SFO",
                    destination="JFK",
                    date="2025-07-01",
                    nonstop_only=True,
                ),
                call("get_user", user_id=ref("c0.user_id")),
                call(
                    "book_flight",
                    user_id=ref("c0.user_id"),
                    flight_id=ref("c1.flights[1].flight_id"),
                    payment_id=ref("c2.payment_methods[0].payment_id"),
                ),
            ),
            required_outputs=[ref("c3.booking_id")],
            note="BJ404 is cheaper but sold out; SW101 is the answer.",
        ),
        task(
            "travel-soldout-recovery",
            ["error_recovery", "dependent_calls"],
            turn(
                "Book flight BJ404 in economy for Mia Chen (user mia_chen) with card "
                "card_mc_4421. If that doesn't work, take the cheapest other SFO to JFK "
                "economy flight that day.",
                call(
                    "book_flight",
                    user_id="mia_chen",
                    flight_id="BJ404",
                    payment_id="card_mc_4421",
                    expect_error="unavailable",
                ),
                call("search_flights", origin="SFO", destination="JFK", date="2025-07-01"),
                call(
                    "book_flight",
                    user_id="mia_chen",
                    flight_id=ref("c1.flights[1].flight_id"),
                    payment_id="card_mc_4421",
                ),
            ),
            required_outputs=[ref("c2.booking_id")],
            note="Search by price: BJ404 (sold out, 199) then AT230 (219).",
        ),
        task(
            "travel-parallel-hotels",
            ["parallel_calls", "optional_params"],
            turn(
                "Compare 4-star-or-better hotels for 3 nights from 2025-07-01 in New York and "
                "in London.",
                [
                    call(
                        "search_hotels",
                        city="New York",
                        check_in="2025-07-01",
                        nights=3,
                        min_stars=4,
                    ),
                    call(
                        "search_hotels", city="London", check_in="2025-07-01", nights=3, min_stars=4
                    ),
                ],
            ),
            required_outputs=["Hudson Loft", "Thames View"],
        ),
        task(
            "travel-clarify-trip",
            ["needs_clarification", "long_horizon", "dependent_calls"],
            turn(
                "I'm omar.h@example.net. Book me a flight to New York on 2025-07-01, the "
                "earliest one, and a hotel there for 4 nights, both on my card.",
                call("find_user", email="omar.h@example.net"),
                call("find_airports", city="New York"),
                call(
                    "search_flights",
                    origin="SFO",
                    destination=ref("c1.airports[0].code"),
                    date="2025-07-01",
                    sort_by="departure",
                ),
                call("get_user", user_id=ref("c0.user_id")),
                call(
                    "book_flight",
                    user_id=ref("c0.user_id"),
                    flight_id=ref("c2.flights[0].flight_id"),
                    payment_id=ref("c3.payment_methods[0].payment_id"),
                ),
                call(
                    "search_hotels", city="New York", check_in="2025-07-01", nights=4, min_stars=4
                ),
                call(
                    "book_hotel",
                    user_id=ref("c0.user_id"),
                    hotel_id=ref("c5.hotels[0].hotel_id"),
                    check_in="2025-07-01",
                    nights=4,
                    payment_id=ref("c3.payment_methods[0].payment_id"),
                ),
                kind="clarify",
                answer="Which airport are you flying from? (the origin is required)",
                clarification="From San Francisco, SFO. For the hotel, 4 stars or more.",
            ),
            required_outputs=[ref("c4.booking_id"), ref("c6.booking_id")],
            note="The origin is missing from the request; the calls follow the clarification.",
        ),
        task(
            "travel-cancel-and-refund",
            ["dependent_calls", "multi_call"],
            turn(
                "Cancel Omar Haddad's Boston to Miami flight (user omar_haddad), I found a "
                "better option, and tell me the refund in euros.",
                call("list_bookings", user_id="omar_haddad"),
                call(
                    "cancel_booking",
                    booking_id=ref("c0.bookings[0].booking_id"),
                    reason="found_better_option",
                ),
                call(
                    "convert_currency",
                    amount=ref("c1.refund_usd"),
                    from_currency="USD",
                    to_currency="EUR",
                ),
            ),
            required_outputs=[ref("c2.converted_amount")],
        ),
        task(
            "travel-baggage-policy",
            ["no_tool_needed"],
            turn(
                "What does IATA stand for?",
                kind="no_tool",
                answer="The International Air Transport Association.",
            ),
            required_outputs=["International Air Transport Association"],
        ),
    ]
# fmt: on


DOMAIN = Domain(
    name="travel",
    description="Flights, hotels, bookings, payment methods and currency conversion.",
    tools=TOOLS,
    build_state=build_state,
    authored_tasks=authored_tasks,
    policy=(
        "You are a travel agent. Identify the traveller (find_user) before booking. Only "
        f"book flights and hotels on or after {TODAY}. Charge only payment methods on file. "
        "Confirm the booking id to the traveller."
    ),
)
