"""GRPO on the pretrained student: a short LoRA SFT warm-up of SmolLM2-135M-Instruct on gold
(teacher) rows of a single-call task family, then GRPO updates (LoRA, the binary exact-match
reward) from it; the saved SFT and GRPO folders are plain transformers models that vLLM can
serve (architecture and dtype in config.json, no quantization, the tool-call chat template
beside the tokenizer).

That GRPO raises the reward is asserted on the tiny student (``test_grpo.py``), where it is
cheap. On SmolLM2 a CPU affords a handful of updates: five of them (G = 4, two tasks) gave
rewards 0.125, 0.25, 0.125, 0.0, 0.375 — a signal, not yet a rise a test can assert.

Run: PYTHONPATH=. python -m pytest tests/train/test_grpo_smollm2.py -q
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from trajsynth.train.grpo import GRPOConfig, train_grpo  # noqa: E402
from trajsynth.train.rollout import RolloutConfig  # noqa: E402
from trajsynth.train.sft import SFTConfig, train_sft  # noqa: E402
from trajsynth.train.synth import env_maker, gold_trajectory, task_variants  # noqa: E402

FAMILY = "math-marathon-miles"  # "How many miles is 42.195 km?": one convert_units call


@pytest.fixture(scope="module")
def make_env():
    return env_maker(200)


@pytest.fixture(scope="module")
def tasks():
    return task_variants(24, seed=5, task_ids=[FAMILY], distractors=0)


@pytest.fixture(scope="module")
def warm_sft(smollm2_home: Path, tasks, make_env, tmp_path_factory) -> Path:
    """A few LoRA steps of SFT on gold rows: the student writes the call format, not yet
    reliably the right values."""
    base = smollm2_home / "models" / "smollm2-135m"
    gold = [gold_trajectory(t, make_env) for t in tasks[:8]]
    out = tmp_path_factory.mktemp("sft")
    cfg = SFTConfig(
        model=str(base),
        lora_r=16,
        lora_layers=8,
        max_steps=6,
        batch_size=1,
        max_len=512,
        lr=2e-3,
        warmup_ratio=0.0,
        reasoning=False,
        resume=False,
    )
    train_sft(gold, out, cfg)
    return out


def check_serveable(folder: Path) -> None:
    """Loads with AutoModelForCausalLM and AutoTokenizer, renders a tool call, and carries
    what vLLM reads from config.json."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["model_type"] == "llama"
    # transformers 5 writes `dtype` (vLLM's config loader maps it to torch_dtype)
    assert (config.get("dtype") or config.get("torch_dtype")) in ("float32", "bfloat16")
    assert "quantization_config" not in config  # a de-quantized GGUF must not say otherwise
    assert (folder / "model.safetensors").is_file()
    assert not list(folder.glob("adapter_*"))  # LoRA merged, no peft folder
    tok = AutoTokenizer.from_pretrained(str(folder))
    assert tok.chat_template and "<tool_call>" in tok.chat_template
    tools = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "description": "d",
                "parameters": {"type": "object", "properties": {}},
            },
        }
    ]
    text = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tools=tools, add_generation_prompt=True, tokenize=False
    )
    assert text.rstrip().endswith("<|im_start|>assistant")
    model = AutoModelForCausalLM.from_pretrained(str(folder))
    assert model.config.num_hidden_layers == 30
    assert not any("lora" in name for name, _ in model.named_parameters())


def first_step_exact(row, messages) -> float:
    """LoopTool's reward: 1 when the first assistant step's calls equal the gold step's as a
    multiset (arguments included), else 0."""
    from trajsynth.core.task import GroundTruth
    from trajsynth.envs.verifiers import exact_multiset_reward

    gold = list(GroundTruth.from_json(row.ground_truth).turns[0].steps[0])
    step = next((m for m in messages if m.role == "assistant"), None)
    pred = list(step.tool_calls) if step is not None and step.tool_calls else "text"
    return exact_multiset_reward(pred, gold)


def test_grpo_updates_smollm2_from_the_warm_up_and_saves_a_serveable_model(
    warm_sft: Path, tasks, make_env, tmp_path
):
    """GRPO (LoRA, G = 4, temperature 1) from the warm-up checkpoint on two held-out tasks of
    the family: the warm-up student earns some reward (calls in the format, some exact), the
    groups with mixed rewards update the policy, and the merged folder is serveable."""
    cfg = GRPOConfig(
        model=str(warm_sft),
        iterations=2,
        tasks_per_step=2,
        group_size=4,
        lr=2e-3,
        lora_r=16,
        lora_layers=8,
        micro_batch=8,
        seed=0,
        resume=False,
        max_observation_chars=200,
        # the call is ~50 SmolLM2 tokens: a shorter cap truncates every call to reward 0
        rollout=RolloutConfig(temperature=1.0, max_new_tokens=64, max_steps=1, batch_size=8),
    )
    result = train_grpo(tasks[8:10], tmp_path / "grpo", cfg, make_env=make_env,
                        reward_fn=first_step_exact)  # fmt: skip
    rewards = [round(h["reward"], 3) for h in result.history]
    print(f"GRPO on SmolLM2: exact-match reward per update {rewards}")
    assert len(rewards) == 2 and all(0.0 <= r <= 1.0 for r in rewards)
    assert sum(h["updates"] for h in result.history) >= 1, result.history
    check_serveable(tmp_path / "grpo")


def test_saved_sft_folder_loads_in_transformers_and_vllm(warm_sft: Path) -> None:
    check_serveable(warm_sft)
    state = json.loads((warm_sft / "trajsynth_sft.json").read_text())
    assert state["result"]["steps"] == 6
