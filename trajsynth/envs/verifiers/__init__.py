"""Verifiers shared by every stage, the trainer's reward and the evaluator: pure functions over
plain data (calls, :class:`~trajsynth.core.GroundTruth`, :class:`~trajsynth.core.Trajectory`).

- :mod:`.schema`: a call against the offered tools, one category per kind of error;
- :mod:`.call_match`: BFCL AST matching and LoopTool's exact-multiset reward;
- :mod:`.final_state`: tau-bench final-state replay and required outputs;
- :mod:`.answer`: an answer against gold answers (exact match, token F1), for QA tasks;
- :mod:`.episode`: APIGen's layered check of a played episode (format → execution → final
  state → outputs → call match), naming the first failing layer.
"""

from .answer import answer_exact_match, answer_f1, extract_answer, normalize_answer
from .call_match import (
    MatchResult,
    NameMode,
    bfcl_check,
    exact_multiset_reward,
    match_call,
    match_multiple,
    match_parallel,
    name_mode,
    standardize_string,
)
from .episode import LAYERS, EpisodeVerdict, verify_episode
from .final_state import (
    FinalStateResult,
    final_state_match,
    replay,
    required_outputs_present,
    verify_trajectory,
)
from .schema import SCHEMA_CATEGORIES, SchemaIssue, check_arguments, check_call, check_trajectory

__all__ = [
    "LAYERS",
    "SCHEMA_CATEGORIES",
    "EpisodeVerdict",
    "FinalStateResult",
    "MatchResult",
    "NameMode",
    "SchemaIssue",
    "answer_exact_match",
    "answer_f1",
    "bfcl_check",
    "check_arguments",
    "check_call",
    "check_trajectory",
    "exact_multiset_reward",
    "extract_answer",
    "final_state_match",
    "match_call",
    "match_multiple",
    "match_parallel",
    "name_mode",
    "normalize_answer",
    "replay",
    "required_outputs_present",
    "standardize_string",
    "verify_episode",
    "verify_trajectory",
]
