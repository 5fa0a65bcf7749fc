"""The trainer: a tiny offline student, SFT, policy-gradient RL with its credit estimators,
and evaluation.

Layer ``train`` (imports envs, llm, quality, core; never stages or pipeline). Torch and transformers
are imported inside the functions that need them, so importing this package stays cheap and
``trajsynth --help`` never loads torch.

- :mod:`.tiny`: the tiny student built from a config, with a tokenizer trained on the data;
- :mod:`.template`: the chat template with generation markers, messages for HF templates;
- :mod:`.data`: tokenization with the assistant-only mask, packing, batches;
- :mod:`.sft`: the SFT loop (:func:`~trajsynth.train.sft.train_sft`);
- :mod:`.grpo`: the policy-gradient loop (:func:`~trajsynth.train.grpo.train_grpo`), with
  :mod:`.losses` and the credit estimators listed in :mod:`.credit`: :mod:`.advantages`
  (GRPO, GiGPO), :mod:`.turn_ppo`, :mod:`.archer`, :mod:`.agent_prm` (and ``train-prm``),
  :mod:`.istar`; :mod:`.starpo` (StarPO-S filtering); :mod:`.critic` (what the critics and
  the PRM share); :mod:`.rewards` (the reward registry);
- :mod:`.rollout`: multi-turn token-in/token-out rollouts against the environments;
- :mod:`.eval`: scores per capability with the shared verifiers
  (:func:`~trajsynth.train.eval.evaluate`);
- :mod:`.synth`: varied tasks from the built-in domains' example tasks, the five-step math
  workflows of ``bench/credit.py``, and their gold trajectories;
- :mod:`.modeling`, :mod:`.checkpoint`, :mod:`.progress`: devices, log-probs, checkpoints.
"""

__all__: list[str] = []
