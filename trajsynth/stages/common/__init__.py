"""Helpers several methods share, kept apart from the methods so that no method module
imports another one (editing a helper here changes every method that uses it, on purpose;
editing a method changes only that method).

- :mod:`.rollouts`: the rollout stages' shared config, environments, rows and judge;
- :mod:`.policies`: LLM roles as the episode's policy, user and edge judge;
- :mod:`.replay`: replaying gold or recorded steps in an environment;
- :mod:`.grounding`: executable ground truth for a planned call path, and execution
  feedback on the signature graph;
- :mod:`.queries`: back-translated user requests, parsed and checked;
- :mod:`.looptool`: what LoopTool's stages exchange (steps, relabelled gold, origins);
- :mod:`.columns`: Arrow column helpers.
"""
