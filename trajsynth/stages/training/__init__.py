"""Training and evaluation as stages: SFT and GRPO of a student, and public benchmarks (BFCL:
decontaminate the training rows, score the checkpoints).
"""
