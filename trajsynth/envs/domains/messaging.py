"""Messaging and calendar: contacts, messages and meetings for one user ("me").

State tables: ``meta`` (today), ``contacts``, ``messages`` (inbox, sent and archive folders),
``events`` (my calendar; attendees are contact ids) and ``busy`` (each contact's busy
blocks, which ``find_free_slot`` respects). A fixed core (a team with a manager, an unread
inbox, a weekly sync) is the same for every seed; the seed adds contacts, messages and
events.

Failure modes: an unknown contact, message or event (``not_found``); an empty message or
more than 20 recipients (``invalid_value`` / ``limit_exceeded``); an event overlapping one
of mine, or cancelling a cancelled event (``conflict``); a date before today or a bad time
(``invalid_value``); no common free slot (``unavailable``).

Data flow: find_contacts → contact_id → send_message.recipient_ids / create_event.attendee_ids
/ find_free_slot.attendee_ids; find_free_slot → start_time → create_event.start_time;
list_messages → message_id → read_message / reply_to_message / archive_message; create_event
/ list_events → event_id → reschedule_event / cancel_event.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Literal, TypedDict, cast

from ..domain import Domain
from ..state import State
from ..tasks import call, ref, task, turn
from ..tools import ToolError, tool
from ._common import fmt_time, get_or_fail, new_id, parse_date, parse_time, rng_for, today

TODAY = "2025-06-16"  # a Monday

CORE_CONTACTS = [
    ("c_dana", "Dana Ruiz", "dana.ruiz@acme.test", "+1-415-555-0101", "analytics"),
    ("c_raj", "Raj Mehta", "raj.mehta@acme.test", "+1-415-555-0102", "analytics"),
    ("c_sofia", "Sofia Lind", "sofia.lind@acme.test", "+46-8-555-0103", "design"),
    ("c_tom", "Tom Becker", "tom.becker@acme.test", "+49-30-555-0104", "sales"),
    ("c_yuki", "Yuki Tanaka", "yuki.tanaka@acme.test", "+81-3-555-0105", "analytics"),
    ("c_dan", "Dan Ruiz", "dan.ruiz@partner.test", "+1-212-555-0106", "external"),
]
CORE_MESSAGES = [
    ("m_001", "c_dana", ["me"], "EMEA figures", "The EMEA numbers are in the shared sheet.",
     "inbox", False),
    ("m_002", "c_tom", ["me"], "Lunch?", "Lunch on Thursday?", "inbox", False),
    ("m_003", "c_raj", ["me"], "Re: dashboard", "I pushed the dashboard fix.", "inbox", True),
    ("m_004", "me", ["c_sofia"], "Mockups", "Can you share the new mockups?", "sent", True),
]  # fmt: skip
CORE_EVENTS = [
    ("e_sync", "Analytics weekly sync", "2025-06-17", 10 * 60, 30, ["c_dana", "c_raj"], "Room 4"),
    ("e_1on1", "1:1 with Dana", "2025-06-18", 14 * 60, 30, ["c_dana"], "Dana's office"),
]
CORE_BUSY = {
    "c_dana": [("2025-06-18", 9 * 60, 12 * 60)],
    "c_raj": [("2025-06-18", 12 * 60, 13 * 60 + 30)],
    "c_yuki": [("2025-06-18", 9 * 60, 10 * 60)],
}
_FIRST = ["Alex", "Bea", "Carl", "Dina", "Emil", "Fern", "Goran", "Hugo", "Iris", "Jon"]
_LAST = ["Stone", "Park", "Moreau", "Ito", "Weiss", "Costa", "Novak", "Reyes"]
_TEAMS = ["analytics", "design", "sales", "support", "legal"]


def build_state(seed: int) -> dict[str, dict]:
    rng = rng_for("messaging", seed)
    contacts = {
        c[0]: dict(zip(("contact_id", "name", "email", "phone", "team"), c, strict=True))
        for c in CORE_CONTACTS
    }
    for i in range(20):
        first, last = rng.choice(_FIRST), rng.choice(_LAST)
        cid = f"c_{first.lower()}{i:02d}"
        contacts[cid] = {
            "contact_id": cid,
            "name": f"{first} {last}",
            "email": f"{first.lower()}.{last.lower()}{i}@acme.test",
            "phone": f"+1-555-01{i:02d}",
            "team": rng.choice(_TEAMS),
        }
    keys = ("message_id", "sender_id", "recipient_ids", "subject", "body", "folder", "read")
    messages = {m[0]: dict(zip(keys, m, strict=True)) for m in CORE_MESSAGES}
    bulk = sorted(c for c in contacts if c not in {x[0] for x in CORE_CONTACTS})
    for i in range(25):
        sender = rng.choice(bulk)
        mid = f"m_{100 + i}"
        messages[mid] = {
            "message_id": mid,
            "sender_id": sender,
            "recipient_ids": ["me"],
            "subject": rng.choice(["Update", "Question", "FYI", "Invoice", "Schedule"]),
            "body": f"Message {i} from {contacts[sender]['name']}.",
            "folder": rng.choice(["inbox", "inbox", "archive"]),
            "read": True,
        }
    ekeys = (
        "event_id",
        "title",
        "date",
        "start_minute",
        "duration_minutes",
        "attendee_ids",
        "location",
    )
    events = {
        e[0]: {**dict(zip(ekeys, e, strict=True)), "status": "scheduled"} for e in CORE_EVENTS
    }
    start = dt.date.fromisoformat(TODAY)
    for i in range(15):
        day = (start + dt.timedelta(days=rng.randint(5, 30))).isoformat()
        eid = f"e_{200 + i}"
        events[eid] = {
            "event_id": eid,
            "title": rng.choice(["Review", "Planning", "Demo", "Interview", "Retro"]),
            "date": day,
            "start_minute": rng.randrange(9 * 60, 16 * 60, 30),
            "duration_minutes": rng.choice([30, 45, 60]),
            "attendee_ids": rng.sample(bulk, k=rng.randint(1, 3)),
            "location": rng.choice(["Room 1", "Room 2", "Video call"]),
            "status": "scheduled",
        }
    busy = {
        cid: {"contact_id": cid, "blocks": [list(b) for b in blocks]}
        for cid, blocks in CORE_BUSY.items()
    }
    return {
        "meta": {"clock": {"today": TODAY}},
        "contacts": contacts,
        "messages": messages,
        "events": events,
        "busy": busy,
    }


# --------------------------------------------------------------------------------------
# response types
# --------------------------------------------------------------------------------------


class Contact(TypedDict):
    contact_id: Annotated[str, "Contact id, e.g. 'c_dana'; use in recipient_ids/attendee_ids."]
    name: Annotated[str, "Full name."]
    email: Annotated[str, "Email address."]
    phone: Annotated[str, "Phone number."]
    team: Annotated[str, "Team or organisation."]


class ContactList(TypedDict):
    contacts: Annotated[list[Contact], "Matching contacts, sorted by name."]


class SentMessage(TypedDict):
    message_id: Annotated[str, "Id of the sent message."]
    recipient_ids: Annotated[list[str], "Contact ids it was sent to."]
    status: Annotated[Literal["sent"], "Delivery status."]


class MessageSummary(TypedDict):
    message_id: Annotated[str, "Message id; pass it to read_message or reply_to_message."]
    sender_id: Annotated[str, "Contact id of the sender ('me' for sent messages)."]
    subject: Annotated[str, "Subject line."]
    snippet: Annotated[str, "First 60 characters of the body."]
    read: Annotated[bool, "Whether it has been read."]


class MessageList(TypedDict):
    messages: Annotated[list[MessageSummary], "Messages, newest id first."]
    count: Annotated[int, "Number returned."]


class FullMessage(TypedDict):
    message_id: Annotated[str, "Message id."]
    sender_id: Annotated[str, "Contact id of the sender."]
    recipient_ids: Annotated[list[str], "Recipients."]
    subject: Annotated[str, "Subject line."]
    body: Annotated[str, "Full text."]
    folder: Annotated[Literal["inbox", "sent", "archive"], "Folder."]
    read: Annotated[bool, "Read flag (true after reading)."]


class FolderResult(TypedDict):
    message_id: Annotated[str, "Message id."]
    folder: Annotated[str, "Folder it is in now."]


class Event(TypedDict):
    event_id: Annotated[str, "Event id; pass it to reschedule_event or cancel_event."]
    title: Annotated[str, "Title."]
    date: Annotated[str, "Date, YYYY-MM-DD."]
    start_time: Annotated[str, "Start, HH:MM."]
    end_time: Annotated[str, "End, HH:MM."]
    attendee_ids: Annotated[list[str], "Contact ids invited."]
    location: Annotated[str, "Where."]
    status: Annotated[Literal["scheduled", "cancelled"], "Status."]


class EventList(TypedDict):
    events: Annotated[list[Event], "Events that day, by start time."]


class CancelResult(TypedDict):
    event_id: Annotated[str, "The cancelled event."]
    status: Annotated[str, "New status ('cancelled')."]
    notified: Annotated[list[str], "Contact ids that were sent a cancellation message."]


class Slot(TypedDict):
    date: Annotated[str, "Date of the slot, YYYY-MM-DD."]
    start_time: Annotated[str, "Earliest start when everyone is free, HH:MM."]
    end_time: Annotated[str, "End of the slot, HH:MM."]


# --------------------------------------------------------------------------------------
# tools
# --------------------------------------------------------------------------------------


def _event_out(e: dict) -> Event:
    return {
        "event_id": e["event_id"],
        "title": e["title"],
        "date": e["date"],
        "start_time": fmt_time(e["start_minute"]),
        "end_time": fmt_time(e["start_minute"] + e["duration_minutes"]),
        "attendee_ids": list(e["attendee_ids"]),
        "location": e["location"],
        "status": e["status"],
    }


def _contacts(db: State, ids: list[str]) -> list[str]:
    for cid in ids:
        get_or_fail(db, "contacts", cid, "contact")
    return list(dict.fromkeys(ids))


def _future_date(db: State, value: str, field: str) -> str:
    if parse_date(value, field) < today(db):
        raise ToolError("invalid_value", f"{field} {value} is before today ({today(db)})")
    return value


def _overlaps(
    db: State, date: str, start: int, minutes: int, skip: str | None = None
) -> str | None:
    for eid, e in db.rows("events"):
        if eid == skip or e["status"] != "scheduled" or e["date"] != date:
            continue
        if (
            start < e["start_minute"] + e["duration_minutes"]
            and e["start_minute"] < start + minutes
        ):
            return eid
    return None


def _send(db: State, recipients: list[str], subject: str, body: str, *extra: str) -> str:
    mid = new_id(db, "messages", "m_", recipients, subject, body, *extra)
    db.put(
        "messages",
        mid,
        {
            "message_id": mid,
            "sender_id": "me",
            "recipient_ids": recipients,
            "subject": subject,
            "body": body,
            "folder": "sent",
            "read": True,
        },
    )
    return mid


@tool()
def find_contacts(
    db: State,
    query: Annotated[str, "Part of a name or email (case-insensitive)."],
    team: Annotated[str | None, "Only contacts in this team."] = None,
) -> ContactList:
    """Find contacts by name or email."""
    q = query.strip().lower()
    found = [
        cast(Contact, dict(c))
        for _, c in db.rows("contacts")
        if (q in c["name"].lower() or q in c["email"].lower())
        and (team is None or c["team"] == team)
    ]
    return {"contacts": sorted(found, key=lambda c: (c["name"], c["contact_id"]))}


@tool()
def get_contact(db: State, contact_id: Annotated[str, "Contact id."]) -> Contact:
    """Get one contact's details."""
    return cast(Contact, dict(get_or_fail(db, "contacts", contact_id, "contact")))


@tool(writes=True)
def send_message(
    db: State,
    recipient_ids: Annotated[list[str], "Contact ids from find_contacts.", {"minItems": 1}],
    body: Annotated[str, "Message text."],
    subject: Annotated[str, "Subject line."] = "",
    urgent: Annotated[bool, "Mark as urgent (adds [URGENT] to the subject)."] = False,
) -> SentMessage:
    """Send a message to one or more contacts."""
    if not body.strip():
        raise ToolError("invalid_value", "the message body is empty")
    if len(recipient_ids) > 20:
        raise ToolError("limit_exceeded", "at most 20 recipients per message")
    recipients = _contacts(db, recipient_ids)
    mid = _send(db, recipients, ("[URGENT] " if urgent else "") + subject, body)
    return {"message_id": mid, "recipient_ids": recipients, "status": "sent"}


@tool()
def list_messages(
    db: State,
    folder: Annotated[Literal["inbox", "sent", "archive"], "Folder to list."] = "inbox",
    unread_only: Annotated[bool, "Only unread messages."] = False,
    from_contact_id: Annotated[str | None, "Only messages from this contact."] = None,
    limit: Annotated[int, "Most messages to return.", {"minimum": 1, "maximum": 50}] = 10,
) -> MessageList:
    """List messages in a folder."""
    found = [
        m
        for _, m in sorted(db.rows("messages"), reverse=True)
        if m["folder"] == folder
        and (not unread_only or not m["read"])
        and (from_contact_id is None or m["sender_id"] == from_contact_id)
    ][:limit]
    out: list[MessageSummary] = [
        {
            "message_id": m["message_id"],
            "sender_id": m["sender_id"],
            "subject": m["subject"],
            "snippet": m["body"][:60],
            "read": m["read"],
        }
        for m in found
    ]
    return {"messages": out, "count": len(out)}


@tool(writes=True)
def read_message(db: State, message_id: Annotated[str, "Message id."]) -> FullMessage:
    """Read a message (marks it read)."""
    m = get_or_fail(db, "messages", message_id, "message")
    if not m["read"]:
        m = db.update("messages", message_id, read=True)
    return cast(FullMessage, {**m, "recipient_ids": list(m["recipient_ids"])})


@tool(writes=True)
def archive_message(db: State, message_id: Annotated[str, "Message id."]) -> FolderResult:
    """Move a message to the archive."""
    m = get_or_fail(db, "messages", message_id, "message")
    if m["folder"] == "archive":
        raise ToolError("conflict", f"message {message_id} is already archived")
    db.update("messages", message_id, folder="archive")
    return {"message_id": message_id, "folder": "archive"}


@tool(writes=True)
def reply_to_message(
    db: State,
    message_id: Annotated[str, "Message to answer."],
    body: Annotated[str, "Reply text."],
) -> SentMessage:
    """Reply to the sender of a message."""
    m = get_or_fail(db, "messages", message_id, "message")
    if m["sender_id"] == "me":
        raise ToolError("invalid_value", f"message {message_id} was sent by you")
    if not body.strip():
        raise ToolError("invalid_value", "the reply body is empty")
    mid = _send(db, [m["sender_id"]], "Re: " + m["subject"], body, message_id)
    return {"message_id": mid, "recipient_ids": [m["sender_id"]], "status": "sent"}


@tool()
def list_events(
    db: State,
    date: Annotated[str, "Day to list, YYYY-MM-DD."],
    attendee_id: Annotated[str | None, "Only events with this contact."] = None,
) -> EventList:
    """List my calendar for a day."""
    parse_date(date, "date")
    found = [
        e
        for _, e in db.rows("events")
        if e["date"] == date
        and e["status"] == "scheduled"
        and (attendee_id is None or attendee_id in e["attendee_ids"])
    ]
    return {"events": [_event_out(e) for e in sorted(found, key=lambda e: e["start_minute"])]}


@tool(writes=True)
def create_event(
    db: State,
    title: Annotated[str, "Title."],
    date: Annotated[str, "Date, YYYY-MM-DD (today or later)."],
    start_time: Annotated[str, "Start, HH:MM (24h)."],
    duration_minutes: Annotated[int, "Length.", {"minimum": 5, "maximum": 480}] = 30,
    attendee_ids: Annotated[list[str], "Contact ids to invite."] = [],  # noqa: B006
    location: Annotated[str, "Where (room or 'Video call')."] = "",
) -> Event:
    """Put a meeting on my calendar and invite contacts."""
    _future_date(db, date, "date")
    start = parse_time(start_time, "start_time")
    attendees = _contacts(db, attendee_ids)
    clash = _overlaps(db, date, start, duration_minutes)
    if clash:
        raise ToolError("conflict", f"overlaps {db.get('events', clash)['title']!r} ({clash})")
    eid = new_id(db, "events", "e_", title, date, start, duration_minutes, attendees)
    e = {
        "event_id": eid,
        "title": title,
        "date": date,
        "start_minute": start,
        "duration_minutes": duration_minutes,
        "attendee_ids": attendees,
        "location": location,
        "status": "scheduled",
    }
    db.put("events", eid, e)
    return _event_out(e)


@tool(writes=True)
def reschedule_event(
    db: State,
    event_id: Annotated[str, "Event to move."],
    new_date: Annotated[str, "New date, YYYY-MM-DD."],
    new_start_time: Annotated[str, "New start, HH:MM."],
) -> Event:
    """Move a meeting to another date and time."""
    e = get_or_fail(db, "events", event_id, "event")
    if e["status"] != "scheduled":
        raise ToolError("conflict", f"event {event_id} is cancelled")
    _future_date(db, new_date, "new_date")
    start = parse_time(new_start_time, "new_start_time")
    clash = _overlaps(db, new_date, start, e["duration_minutes"], skip=event_id)
    if clash:
        raise ToolError("conflict", f"overlaps {db.get('events', clash)['title']!r} ({clash})")
    return _event_out(db.update("events", event_id, date=new_date, start_minute=start))


@tool(writes=True)
def cancel_event(
    db: State,
    event_id: Annotated[str, "Event to cancel."],
    notify_attendees: Annotated[bool, "Send each attendee a cancellation message."] = True,
) -> CancelResult:
    """Cancel a meeting."""
    e = get_or_fail(db, "events", event_id, "event")
    if e["status"] == "cancelled":
        raise ToolError("conflict", f"event {event_id} is already cancelled")
    db.update("events", event_id, status="cancelled")
    notified = list(e["attendee_ids"]) if notify_attendees else []
    if notified:
        _send(db, notified, f"Cancelled: {e['title']}", f"{e['title']} on {e['date']} is off.")
    return {"event_id": event_id, "status": "cancelled", "notified": notified}


@tool()
def find_free_slot(
    db: State,
    date: Annotated[str, "Day to search, YYYY-MM-DD."],
    duration_minutes: Annotated[int, "Length needed.", {"minimum": 5, "maximum": 480}],
    attendee_ids: Annotated[list[str], "Contacts who must be free too."] = [],  # noqa: B006
    earliest: Annotated[str, "Earliest start, HH:MM."] = "09:00",
    latest: Annotated[str, "Latest end, HH:MM."] = "17:00",
) -> Slot:
    """Find the earliest time when I and the attendees are all free."""
    _future_date(db, date, "date")
    lo, hi = parse_time(earliest, "earliest"), parse_time(latest, "latest")
    attendees = _contacts(db, attendee_ids)
    blocks = [
        (e["start_minute"], e["start_minute"] + e["duration_minutes"])
        for _, e in db.rows("events")
        if e["date"] == date and e["status"] == "scheduled"
    ]
    for cid in attendees:
        for day, s, t in (db.get("busy", cid) or {"blocks": []})["blocks"]:
            if day == date:
                blocks.append((s, t))
    start = lo
    for s, t in sorted(blocks):
        if start + duration_minutes <= s:
            break
        start = max(start, t)
    if start + duration_minutes > hi:
        raise ToolError("unavailable", f"no common {duration_minutes}-minute slot on {date}")
    return {
        "date": date,
        "start_time": fmt_time(start),
        "end_time": fmt_time(start + duration_minutes),
    }


TOOLS = [
    find_contacts,
    get_contact,
    send_message,
    list_messages,
    read_message,
    archive_message,
    reply_to_message,
    list_events,
    create_event,
    reschedule_event,
    cancel_event,
    find_free_slot,
]


# fmt: off
def authored_tasks() -> list:
    return [
        task(
            "messaging-unread",
            ["single_call", "optional_params"],
            turn("Do I have unread messages?", call("list_messages", unread_only=True)),
            required_outputs=["EMEA figures", "Lunch?"],
        ),
        task(
            "messaging-schedule-with-team",
            ["dependent_calls", "long_horizon", "optional_params"],
            turn(
                "Set up a 1-hour 'Q3 planning' meeting on 2025-06-18 with Dana Ruiz and Raj "
                "Mehta at the earliest time we're all free, in Room 4, then message them.",
                call("find_contacts", query="Dana Ruiz"),
                call("find_contacts", query="Raj"),
                call(
                    "find_free_slot",
                    date="2025-06-18",
                    duration_minutes=60,
                    attendee_ids=[
                        ref("c0.contacts[0].contact_id"),
                        ref("c1.contacts[0].contact_id"),
                    ],
                ),
                call(
                    "create_event",
                    title="Q3 planning",
                    date="2025-06-18",
                    start_time=ref("c2.start_time"),
                    duration_minutes=60,
                    attendee_ids=[
                        ref("c0.contacts[0].contact_id"),
                        ref("c1.contacts[0].contact_id"),
                    ],
                    location="Room 4",
                ),
                call(
                    "send_message",
                    recipient_ids=[
                        ref("c0.contacts[0].contact_id"),
                        ref("c1.contacts[0].contact_id"),
                    ],
                    subject="Q3 planning",
                    body="Q3 planning is on 2025-06-18 at {{c2.start_time}} in Room 4.",
                ),
            ),
            required_outputs=[ref("c2.start_time")],
            note="Dana is busy 9-12, Raj 12-13:30, 1:1 with Dana 14:00-14:30: slot 14:30.",
        ),
        task(
            "messaging-clarify-dan",
            ["needs_clarification", "dependent_calls"],
            turn(
                "Send Dan a message that the report is ready.",
                call("find_contacts", query="Dan Ruiz"),
                call(
                    "send_message",
                    recipient_ids=[ref("c0.contacts[0].contact_id")],
                    body="The report is ready.",
                ),
                kind="clarify",
                answer="There are two matching contacts (Dana Ruiz, Dan Ruiz). Which one?",
                clarification="Dan Ruiz from the partner company.",
            ),
        ),
        task(
            "messaging-parallel-triage",
            ["parallel_calls"],
            turn(
                "Archive the Lunch message and read me the EMEA one.",
                [
                    call("archive_message", message_id="m_002"),
                    call("read_message", message_id="m_001"),
                ],
            ),
            required_outputs=["shared sheet"],
        ),
        task(
            "messaging-conflict-recovery",
            ["error_recovery", "dependent_calls"],
            turn(
                "Book a 30-minute 'Budget check' on 2025-06-17 at 10:00 with Yuki; if that "
                "clashes, take the first free slot that morning.",
                call(
                    "create_event",
                    title="Budget check",
                    date="2025-06-17",
                    start_time="10:00",
                    attendee_ids=["c_yuki"],
                    expect_error="conflict",
                ),
                call(
                    "find_free_slot",
                    date="2025-06-17",
                    duration_minutes=30,
                    attendee_ids=["c_yuki"],
                    earliest="10:00",
                    latest="12:00",
                ),
                call(
                    "create_event",
                    title="Budget check",
                    date="2025-06-17",
                    start_time=ref("c1.start_time"),
                    attendee_ids=["c_yuki"],
                ),
            ),
            required_outputs=[ref("c2.event_id")],
        ),
        task(
            "messaging-etiquette",
            ["no_tool_needed"],
            turn(
                "What does CC mean in an email?",
                kind="no_tool",
                answer="Carbon copy: the recipient gets a copy for their information.",
            ),
            required_outputs=["carbon copy"],
        ),
    ]
# fmt: on


DOMAIN = Domain(
    name="messaging",
    description="Contacts, messages and a calendar for one user.",
    tools=TOOLS,
    build_state=build_state,
    authored_tasks=authored_tasks,
    policy=(
        "You are an assistant with access to the user's messages and calendar. Resolve names "
        f"to contact ids with find_contacts; ask when a name is ambiguous. Today is {TODAY}."
    ),
)
