"""Stages every pipeline needs that are not methods: sample, concat, split, and synthetic rows
for tests and benchmarks.
"""
