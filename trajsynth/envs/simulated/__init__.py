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

Modules: :mod:`.environment` (the environment, steps 1, 3, 4 and 6), :mod:`.effects` (step 2),
:mod:`.kinds` (entity kinds, inferred response schemas, new ids), :mod:`.values` (schema-valid
values, filling a response), :mod:`.answers` (step 5's proposal, the answering model's query,
the answer check and cache).
"""

from __future__ import annotations

from .answers import AnswerCache, ToolQuery
from .answers import Answerer as Answerer
from .answers import validate_response as validate_response
from .effects import VERBS as VERBS
from .effects import ToolEffect, is_id_param, tool_effect
from .effects import id_kind as id_kind
from .environment import POPULATION as POPULATION
from .environment import SimulatedEnvironment
from .kinds import with_responses
from .values import fill as fill
from .values import make_value as make_value

__all__ = [
    "AnswerCache",
    "SimulatedEnvironment",
    "ToolEffect",
    "ToolQuery",
    "is_id_param",
    "tool_effect",
    "with_responses",
]
