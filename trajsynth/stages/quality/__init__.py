"""Data-quality stages: verify, score, filter, deduplicate, cluster, grade and balance rows,
expire stale ones, and cut them to the shape a benchmark scores.
"""
