"""The simulator's settings and the metadata contract of every simulated role.

A real LLM reads the prompt a stage writes; the simulator cannot, so each request also carries
a structured payload in ``metadata`` that says what the prompt says. Stages build both: the
prompt for real endpoints, the metadata for the simulator. Over HTTP (``trajsynth serve
--backend sim``) the client sends it as the body field ``trajsynth_metadata`` when the role
has ``send_metadata: true``.

Every payload has ``role`` (which behaviour answers; see ``ROLE_BEHAVIOURS``) and optional
``sample``/``attempt`` integers that change the random draws without changing the request
(retries, extra samples). Unknown keys are errors, so a typo in a stage fails its first test.

=============  =======================  ================================================
behaviour      role names               payload model → what the content holds
=============  =======================  ================================================
actor          teacher, actor, policy,  :class:`ActorMeta` → an assistant step: tool calls
               student, assistant       (native or text, per ``call_format``) or text
director       director, planner        :class:`DirectorMeta` → JSON ``{"turns": [...]}``
user           user, user_simulator     :class:`UserMeta` → the next user message
query_writer   query_writer             :class:`QueryWriterMeta` → JSON ``{"queries": [...]}``
judge          judge                    :class:`JudgeMeta` → LoopTool verdict text, APIGen
                                        JSON, or an edge verdict
verifier       verifier                 :class:`VerifierMeta` → JSON ``{"correct", "hint"}``
rewriter       rewriter                 :class:`RewriterMeta` → ECHO JSON
reflector      reflector                :class:`ReflectorMeta` → a STeCa thought
expander       expander, generator      :class:`ExpanderMeta` → ``INPUT: … OUTPUT: …``
tool           tool, tool_simulator     :class:`ToolMeta` → the tool's output as JSON
=============  =======================  ================================================
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from ...core.config import StrictModel
from ...core.schema import Message
from ...core.task import GoldCall, GroundTruth

__all__ = [
    "ROLE_BEHAVIOURS",
    "VERDICTS",
    "VERDICT_STATUS",
    "ActorMeta",
    "DirectorMeta",
    "ExpanderMeta",
    "JudgeMeta",
    "QueryWriterMeta",
    "ReflectorMeta",
    "RewriterMeta",
    "SimConfig",
    "SkillProfile",
    "ToolMeta",
    "UserMeta",
    "VerifierMeta",
]

#: role name (pipeline ``llm:`` key or ``metadata.role``) → simulated behaviour
ROLE_BEHAVIOURS: dict[str, str] = {
    "teacher": "actor",
    "actor": "actor",
    "policy": "actor",
    "student": "actor",
    "assistant": "actor",
    "director": "director",
    "planner": "director",
    "user": "user",
    "user_simulator": "user",
    "query_writer": "query_writer",
    "judge": "judge",
    "verifier": "verifier",
    "rewriter": "rewriter",
    "reflector": "reflector",
    "expander": "expander",
    "generator": "expander",
    "tool": "tool",
    "tool_simulator": "tool",
}

#: per-call error kinds (mutually exclusive per call) and per-turn error kinds
CALL_ERRORS = (
    "drop_optional_param",
    "wrong_argument_value",
    "wrong_tool",
    "malformed_json",
    "hallucinated_tool",
)
TURN_ERRORS = (
    "stop_early",
    "missing_dependent_call",
    "wrong_call_order",
)
_OTHER_RATES = ("needless_clarification", "spurious_call", "skip_clarification")
_ALL_RATES = (*CALL_ERRORS, *TURN_ERRORS, *_OTHER_RATES)


class SkillProfile(StrictModel):
    """Error rates of the simulated actor, one per capability.

    Per call (at most one per call; a kind that cannot apply to a call — no optional argument
    to drop, no other tool to confuse it with — is not drawn, so each rate is the probability
    *given that the error is possible*):

    - ``drop_optional_param``: an optional argument the user gave is left out;
    - ``wrong_argument_value``: one argument gets a wrong value (a different entity, a shifted
      number or date, a flipped flag);
    - ``wrong_tool``: another offered tool is called with the same arguments;
    - ``malformed_json``: the arguments are not valid JSON;
    - ``hallucinated_tool``: a tool name that is not offered is called.

    Per tool turn, structural (at most one per turn, each only where possible):

    - ``stop_early``: answers after k of n steps (n ≥ 2, 1 ≤ k < n);
    - ``missing_dependent_call``: skips one non-final step whose result a later step needs;
    - ``wrong_call_order``: swaps two adjacent different steps.

    Per tool turn, independently of the structural draw: ``needless_clarification`` (asks a
    question before acting; after the user's answer it acts, with the same plan).
    Per no-tool turn ``spurious_call`` (calls a tool anyway); per clarify turn
    ``skip_clarification`` (guesses the missing value instead of asking; where no offered
    function fits the request, calls one anyway).

    The default succeeds on roughly 30–60% of typical multi-call tasks and is clearly weak at
    dependent calls, optional parameters, clarification and no-tool turns, so LoopTool's
    probe (GCP) has something real to find.
    """

    drop_optional_param: float = Field(0.15, ge=0, le=1)
    wrong_argument_value: float = Field(0.03, ge=0, le=1)
    wrong_tool: float = Field(0.03, ge=0, le=1)
    malformed_json: float = Field(0.02, ge=0, le=1)
    hallucinated_tool: float = Field(0.02, ge=0, le=1)
    needless_clarification: float = Field(0.03, ge=0, le=1)
    stop_early: float = Field(0.05, ge=0, le=1)
    missing_dependent_call: float = Field(0.25, ge=0, le=1)
    wrong_call_order: float = Field(0.08, ge=0, le=1)
    spurious_call: float = Field(0.20, ge=0, le=1)
    skip_clarification: float = Field(0.35, ge=0, le=1)
    hint_error_scale: float = Field(
        0.25,
        ge=0,
        le=1,
        description="Every rate is multiplied by this when the request has a hint.",
    )

    @model_validator(mode="after")
    def _sums(self) -> SkillProfile:
        for group in (CALL_ERRORS, TURN_ERRORS):
            total = sum(getattr(self, k) for k in group)
            if total > 1:
                raise ValueError(f"the rates {list(group)} sum to {total:.3f} > 1")
        return self

    def scaled(self, factor: float) -> SkillProfile:
        """All rates multiplied by ``factor`` (hints make the actor better)."""
        data = self.model_dump()
        for k in _ALL_RATES:
            data[k] = data[k] * factor
        return SkillProfile.model_validate(data)

    @classmethod
    def perfect(cls) -> SkillProfile:
        """A profile that never errs (an oracle; useful in tests and as a gold replayer)."""
        zero = dict.fromkeys(_ALL_RATES, 0.0)
        return cls(**zero)


class SimConfig(StrictModel):
    """``sim:`` settings of a role with ``backend: sim``."""

    seed: int = Field(0, description="Base seed; the same seed and request give the same answer.")
    role: str | None = Field(
        None, description="Behaviour to use (default: metadata.role, else the role's name)."
    )
    profile: SkillProfile = Field(default_factory=SkillProfile, description="Actor error rates.")
    call_format: Literal["native", "hermes", "pythonic", "json"] = Field(
        "native", description="How the actor writes calls: API tool_calls or text formats."
    )
    think: bool = Field(True, description="The actor writes a reasoning string per step.")
    judge_accuracy: float = Field(
        0.9, ge=0, le=1, description="Probability a judge verdict is the true one."
    )
    rewriter_abstain_rate: float = Field(0.1, ge=0, le=1, description="ECHO abstentions.")
    rewriter_error_rate: float = Field(
        0.1, ge=0, le=1, description="Rewrites with one wrong argument (replay must catch them)."
    )
    expander_garbage_rate: float = Field(
        0.1, ge=0, le=1, description="EDDE generations that are unusable (must be rejected)."
    )


# --------------------------------------------------------------------------------------
# per-role payloads
# --------------------------------------------------------------------------------------

#: calls as {"name", "arguments"} objects, or raw model text (parsed with the shared parser)
CallsOrText = list[GoldCall] | str


class _Meta(StrictModel):
    role: str = Field(description="Which role answers (see ROLE_BEHAVIOURS).")
    sample: int = Field(0, description="Sample index: changes draws, not the request.")
    attempt: int = Field(0, description="Retry index (HardGen/EDDE retries): changes draws.")


class ActorMeta(_Meta):
    """teacher/actor: act on a task whose ground truth is known.

    The actor finds where the conversation is (which gold turn, how many steps of it are done,
    whether a clarification was answered) from the request's ``messages`` and plays the next
    step of the gold plan, with the profile's errors drawn per (task, turn, step, call) — so a
    rollout continued from any prefix (STeCa, TSR) stays consistent. Pass the same request
    ``seed`` for every step of one rollout and a different one per rollout.
    """

    ground_truth: GroundTruth
    turn: int | None = Field(None, description="Gold turn index (default: from the messages).")
    profile: SkillProfile | None = Field(None, description="Overrides the role's profile.")
    hint: bool = Field(
        False,
        description="The prompt carries a hint (Magnet's positive [Hint], HardGen's verifier "
        "hint): error rates are scaled by profile.hint_error_scale.",
    )
    hint_steps: list[list[GoldCall]] | None = Field(
        None,
        description="Calls the hint suggests for the current turn (Magnet negatives: wrong "
        "calls given as a misleading hint); the actor follows them instead of the gold steps.",
    )


class DirectorMeta(_Meta):
    """director: a turn-by-turn outline of user needs that never names a tool.

    From ``ground_truth`` when given (one entry per gold turn), otherwise planned over the
    request's ``tools``: ``num_turns`` turns of kinds tool_call / non_tool / chit_chat /
    clarify, adjacent turns related, at least one multi-tool need (LoopTool's planner).
    """

    ground_truth: GroundTruth | None = None
    num_turns: int | None = Field(None, ge=1, le=20)
    tools: list[dict[str, Any]] | None = Field(None, description="Overrides request tools.")
    plan_for: Literal["user", "actor"] = Field(
        "user",
        description="actor: a plan for the assistant — each turn also lists the tools to "
        "call (the gold calls' names in order, or the sampled tools).",
    )


class UserMeta(_Meta):
    """user simulator: the next user message, revealing the goal one turn at a time.

    Reads the agent-side conversation in ``messages``: with no user message yet it opens with
    turn 0's request; after a clarification question it gives the turn's ``clarification``;
    after a final answer it moves to the next turn; after the last turn it says ``stop_token``.
    """

    ground_truth: GroundTruth
    persona: str | None = Field(None, description="e.g. busy professional, student, retiree.")
    stop_token: str = Field("###STOP###", description="What the user says when done (τ-bench).")


class QueryWriterMeta(_Meta):
    """query writer: natural requests for a call path (Magnet back-translation).

    ``steps`` is one turn's path (steps of parallel calls). Each query contains every argument
    value except those taken from an earlier call's output, and never the function names.
    """

    steps: list[list[GoldCall]]
    tools: list[dict[str, Any]] | None = Field(None, description="Overrides request tools.")
    n_queries: int = Field(3, ge=1, le=20, description="Phrasings returned.")
    persona: str | None = None
    style: Literal["plain", "casual", "formal", "terse"] | None = None


#: LoopTool's JGLV verdicts (Response 1 is the label, Response 2 the prediction): what the
#: stage's prompt asks for and what the simulated judge answers
VERDICTS = ("RESPONSE1_INCORRECT", "RESPONSE2_INCORRECT", "BOTH_CORRECT", "BOTH_INCORRECT")
#: each verdict as the status JGLV records for the sample
VERDICT_STATUS = dict(
    zip(
        VERDICTS,
        ("original_incorrect", "model_incorrect", "both_correct", "both_incorrect"),
        strict=True,
    )
)


class JudgeMeta(_Meta):
    """judge, with ``mode``:

    - ``looptool`` (JGLV): ``label`` (Response 1) vs ``prediction`` (Response 2) →
      ``"RESPONSE1_INCORRECT.\\nError Analysis: … Correct Approach: …"`` (or RESPONSE2_INCORRECT,
      BOTH_CORRECT, BOTH_INCORRECT). The true verdict is ``truth`` if given, else from
      ``reference`` (the truly correct calls), else from schema validity against the tools
      (both valid and different → RESPONSE2_INCORRECT: the label is trusted).
    - ``looptool_single``: ``response`` → ``"CORRECT."`` / ``"INCORRECT.\\nError Analysis: …"``.
    - ``apigen`` (semantic check): ``query``, ``calls``, ``results`` → JSON
      ``{"thought": …, "passes": "yes"|"no"}``; true verdict from ``truth``, else calls valid,
      results without errors, and equal to ``reference`` when given.
    - ``edge`` (Magnet graph): does ``source_tool``'s output feed an input of ``target_tool``?
      → JSON ``{"related": "yes"|"no", "reason": …}``.
    - ``rubric`` (a judge reward): ``calls`` (the episode's), ``answer``, ``reference``,
      ``required_outputs``, ``format_errors`` → JSON ``{dimension: score in [0, 1]}`` for each
      of ``dimensions``: completion (every reference call made and an answer given),
      accuracy (the share of reference calls matched), structure (no format error, calls
      valid against the tools), citations (the share of required outputs in the answer);
      an unknown dimension scores like completion. Each score is the true one with
      probability ``accuracy``, else a draw in [0, 1].

    The verdict is the true one with probability ``accuracy`` (default: the role's
    ``judge_accuracy``), otherwise one of the others, drawn per request seed and choice — so
    several votes (n > 1 or several seeds) disagree as real judges do.
    """

    mode: Literal["looptool", "looptool_single", "apigen", "edge", "rubric"] = "looptool"
    label: CallsOrText | None = None
    prediction: CallsOrText | None = None
    response: CallsOrText | None = None
    reference: CallsOrText | None = None
    query: str | None = None
    calls: CallsOrText | None = None
    results: list[Any] | None = None
    source_tool: dict[str, Any] | None = None
    target_tool: dict[str, Any] | None = None
    truth: str | bool | None = Field(None, description="The true verdict, when the stage knows.")
    accuracy: float | None = Field(None, ge=0, le=1)
    tools: list[dict[str, Any]] | None = Field(None, description="Overrides request tools.")
    answer: str | None = Field(None, description="rubric: the episode's final answer.")
    dimensions: list[str] | None = Field(None, description="rubric: the dimensions to score.")
    required_outputs: list[str] | None = Field(None, description="rubric: values to report.")
    format_errors: int = Field(0, ge=0, description="rubric: the episode's format errors.")


class VerifierMeta(_Meta):
    """verifier (HardGen): compares an attempt with the gold trace and returns a corrective
    hint that never reveals a gold value: JSON ``{"correct": bool, "hint": str}``."""

    gold: list[list[GoldCall]] = Field(description="The gold trace, steps of calls.")
    candidate: CallsOrText = Field(description="The reasoner's calls (or raw text) to check.")


class RewriterMeta(_Meta):
    """rewriter (ECHO): hindsight goals from what a trajectory actually achieved.

    ``trajectory`` (default: the request's messages) is read for executed calls and their
    results; only calls whose results are not errors count as achieved.

    - ``rewrite`` → JSON ``{"query", "workflow", "final_answer", "calls"}`` for the achieved
      goal, or all empty (abstention) when nothing was achieved or, at ``abstain_rate``, when
      unsure; at ``error_rate`` one argument of ``calls`` is wrong (the replay must reject it).
    - ``goals`` → JSON ``{"possible_goals": [...]}``, one per achieved call and one for all.
    """

    mode: Literal["rewrite", "goals"] = "rewrite"
    trajectory: list[Message] | None = Field(
        None, description="Messages (core or OpenAI form); default: the request's messages."
    )
    tools: list[dict[str, Any]] | None = None
    abstain_rate: float | None = Field(None, ge=0, le=1)
    error_rate: float | None = Field(None, ge=0, le=1)

    @field_validator("trajectory", mode="before")
    @classmethod
    def _flat_calls(cls, value: Any) -> Any:
        """Accept OpenAI-form messages (tool_calls nested under ``function``)."""
        if not isinstance(value, list):
            return value
        out = []
        for m in value:
            if isinstance(m, dict) and m.get("tool_calls"):
                calls = []
                for tc in m["tool_calls"]:
                    fn = tc.get("function") if isinstance(tc, dict) else None
                    if isinstance(fn, dict):
                        args = fn.get("arguments", "{}")
                        calls.append(
                            {
                                "id": tc.get("id", ""),
                                "name": fn.get("name", ""),
                                "arguments": args if isinstance(args, str) else json.dumps(args),
                            }
                        )
                    else:
                        calls.append(tc)
                m = {k: v for k, v in m.items() if k != "type"} | {"tool_calls": calls}
            out.append(m)
        return out


class ReflectorMeta(_Meta):
    """reflector (STeCa): the thought that leads from a deviated step back to the expert's
    next action: plain text naming what went wrong and the action to take."""

    expert_action: list[GoldCall]
    deviated_action: CallsOrText | None = None
    goal: str | None = None


class ExpanderMeta(_Meta):
    """expander (LoopTool EDDE): new training samples around an error seed.

    Keeps the tool set and the calls' structure, changes every argument value, writes a new
    request for them: ``INPUT: <request>\\nOUTPUT: <tool_call>…</tool_call>``. At
    ``garbage_rate`` the output is unusable (no OUTPUT, or no call), as real generations
    sometimes are. ``variation`` (complexity, persona, interaction style, data) changes the
    phrasing.
    """

    correct: list[GoldCall]
    query: str | None = None
    incorrect: CallsOrText | None = None
    error_analysis: str | None = None
    variation: str | None = None
    tools: list[dict[str, Any]] | None = None
    garbage_rate: float | None = Field(None, ge=0, le=1)


class ToolMeta(_Meta):
    """tool: answers one call of a tool that has only a spec (the ``simulated`` environment).

    The environment keeps the ledger (what earlier calls created or changed) and proposes a
    schema-valid answer grounded in it; the simulator returns that answer as JSON
    (``{"error": {...}}`` for a refused call), so an offline run answers exactly as the
    environment would without a model, through the same role a real model plays.
    """

    seed: int = Field(description="The environment's seed.")
    state_hash: str = Field(description="Hash of the state the call runs in.")
    tool: dict[str, Any] = Field(description="The spec: name, description, parameters, response.")
    call: dict[str, Any] = Field(description="{name, arguments}.")
    ledger: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Entity tables the call involves: kind → id → record."
    )
    proposal: dict[str, Any] = Field(
        description="The environment's answer: {output} or {error: {type, message}}."
    )
