"""The simulated LLM (``backend: sim``): the offline default for every role.

**This is a simulator, not a model.** Each role is scripted over structured inputs the stage
passes in request ``metadata`` (the contracts in :mod:`.contracts`), seeded and deterministic
for a given seed and request, so that every pipeline — the LoopTool loop included — runs on a
fresh machine with no key and no network, and every stage can be tested against known
behaviour. It is never used as the model under training.

- :mod:`.contracts` — settings (:class:`SimConfig`, :class:`SkillProfile`) and the metadata
  payload of every role;
- :mod:`.actor` — teacher/actor (acts on a task's ground truth with a seeded skill profile)
  and user simulator;
- :mod:`.writers` — director, query writer, expander (EDDE);
- :mod:`.phrasing` — how the roles word requests (a tool's purpose paraphrased, every value
  stated in a form that maps back to it) and the teacher's thoughts;
- :mod:`.judge` — JGLV / APIGen / edge judges and the HardGen verifier;
- :mod:`.repair` — ECHO rewriter and STeCa reflector;
- :mod:`.backend` — :class:`SimBackend`: dispatch, seeding, rendering, log-probs, usage.
"""

from .backend import SimBackend
from .contracts import (
    ROLE_BEHAVIOURS,
    ActorMeta,
    DirectorMeta,
    ExpanderMeta,
    JudgeMeta,
    QueryWriterMeta,
    ReflectorMeta,
    RewriterMeta,
    SimConfig,
    SkillProfile,
    UserMeta,
    VerifierMeta,
)

__all__ = [
    "ROLE_BEHAVIOURS",
    "ActorMeta",
    "DirectorMeta",
    "ExpanderMeta",
    "JudgeMeta",
    "QueryWriterMeta",
    "ReflectorMeta",
    "RewriterMeta",
    "SimBackend",
    "SimConfig",
    "SkillProfile",
    "UserMeta",
    "VerifierMeta",
]
