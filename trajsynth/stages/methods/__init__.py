"""Paper methods as stages: each module one method, named after it, citing its paper."""
