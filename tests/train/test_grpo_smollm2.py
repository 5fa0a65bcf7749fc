"""GRPO on the pretrained student: a short LoRA SFT warm-up of SmolLM2-135M-Instruct on gold
(teacher) rows of a single-call task family, then GRPO updates (LoRA, the binary exact-match
reward) from it that raise the reward; the saved SFT and GRPO folders are plain transformers
models that vLLM can serve (architecture and dtype in config.json, no quantization, the
tool-call chat template beside the tokenizer).

The warm-up (6 steps) leaves a student that greedily writes the right call for most held-out
tasks but, sampled at temperature 0.7, writes a broken or wrong call about half the time, so a
group of G = 8 has mixed rewards. Each rollout is one generation (``max_steps`` 1, only the
task's tool offered, 64 new tokens at most) and is rewarded by LoopTool's exact multiset match
of its calls (``first_step_exact``). Measured here (2 CPU cores, seed 0): the reward per update
was 0.375, 0.5, 0.75 and the share of rollouts with a format error 0.5, 0.0, 0.0 — three
updates of eight rollouts of one task. ``bench/grpo.py`` runs longer and compares the GRPO
checkpoint with the warm-up one on held-out tasks.

Run: PYTHONPATH=. python -m pytest tests/train/test_grpo_smollm2.py -q
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from trajsynth.train.eval import first_step_exact  # noqa: E402
from trajsynth.train.grpo import GRPOConfig, train_grpo  # noqa: E402
from trajsynth.train.rollout import RolloutConfig  # noqa: E402
from trajsynth.train.sft import SFTConfig, train_sft  # noqa: E402
from trajsynth.train.synth import env_maker, gold_trajectory, task_variants  # noqa: E402

FAMILY = "math-marathon-miles"  # "How many miles is 42.195 km?": one convert_units call
ITERATIONS = 3
RISE = 0.25  # of the mean reward, first update → last


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


@pytest.mark.slow
def test_grpo_raises_the_exact_match_reward_of_smollm2_and_saves_a_serveable_model(
    warm_sft: Path, tasks, make_env, tmp_path
):
    """GRPO (LoRA, β = 0, one pass per batch) from the warm-up checkpoint on one held-out task
    of the family, G = 8 one-turn rollouts per update at temperature 0.7 (an episode is one
    generation), rewarded by LoopTool's exact multiset match of that turn's calls: the groups
    have mixed rewards, and the reward rises over the updates. The merged folder is
    serveable."""
    cfg = GRPOConfig(
        model=str(warm_sft),
        iterations=ITERATIONS,
        tasks_per_step=1,
        group_size=8,
        lr=2e-3,
        lora_r=16,
        lora_layers=8,
        micro_batch=16,
        seed=0,
        resume=False,
        max_observation_chars=200,
        # the call is ~50 SmolLM2 tokens: a shorter cap truncates every call to reward 0
        rollout=RolloutConfig(temperature=0.7, max_new_tokens=64, max_steps=1, batch_size=16),
    )
    result = train_grpo(tasks[8:9], tmp_path / "grpo", cfg, make_env=make_env,
                        reward_fn=first_step_exact)  # fmt: skip
    rewards = [round(h["reward"], 3) for h in result.history]
    print(f"GRPO on SmolLM2: exact-match reward per update {rewards}")
    assert len(rewards) == ITERATIONS and all(0.0 <= r <= 1.0 for r in rewards)
    assert 0.0 < rewards[0] < 1.0  # the warm-up's groups have signal
    assert rewards[-1] >= rewards[0] + RISE, rewards
    # the first update already rids the policy of its broken calls
    errors = [h["format_errors"] for h in result.history]
    assert errors[-1] < errors[0], errors
    assert all(h["updates"] == 1 for h in result.history), result.history
    check_serveable(tmp_path / "grpo")


def test_saved_sft_folder_loads_in_transformers_and_vllm(warm_sft: Path) -> None:
    check_serveable(warm_sft)
    state = json.loads((warm_sft / "trajsynth_sft.json").read_text())
    assert state["result"]["steps"] == 6
