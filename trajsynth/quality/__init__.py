"""Quality: verifiers-based scores, dedup, diversity, difficulty, balance, statistics."""
