"""The trainer: a tiny offline student, SFT, GRPO/GiGPO and evaluation.

Layer ``train`` (imports envs, llm, core; never stages or pipeline). Torch and transformers
are imported inside the functions that need them, so importing this package stays cheap and
``trajsynth --help`` never loads torch.

- :mod:`.tiny`: the tiny student built from a config, with a tokenizer trained on the data;
- :mod:`.template`: the chat template with generation markers, messages for HF templates;
- :mod:`.data`: tokenization with the assistant-only mask, packing, batches;
- :mod:`.sft`: the SFT loop (:func:`~trajsynth.train.sft.train_sft`);
- :mod:`.advantages`, :mod:`.losses`, :mod:`.grpo`: GRPO/GiGPO
  (:func:`~trajsynth.train.grpo.train_grpo`);
- :mod:`.rollout`: multi-turn token-in/token-out rollouts against the environments;
- :mod:`.eval`: scores per capability with the shared verifiers
  (:func:`~trajsynth.train.eval.evaluate`);
- :mod:`.synth`: varied tasks from the built-in domains' example tasks and their gold
  trajectories;
- :mod:`.modeling`, :mod:`.checkpoint`, :mod:`.progress`: devices, log-probs, checkpoints.
"""

__all__: list[str] = []
