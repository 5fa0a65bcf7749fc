"""LoopTool's closed loop (arXiv:2511.09148) as stages: GCP, JGLV, EDDE, the round boundary,
the static baseline, the report, and the wrong labels JGLV is measured against.
"""
