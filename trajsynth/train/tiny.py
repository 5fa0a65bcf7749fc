"""The tiny offline student: a byte-level BPE tokenizer trained on the data and a small
Llama-style causal LM built from a config, saved as a standard transformers folder.

Nothing is downloaded. The folder (``config.json``, ``model.safetensors``,
``generation_config.json``, ``tokenizer.json``, ``tokenizer_config.json``,
``chat_template.jinja``) loads with ``AutoModelForCausalLM`` / ``AutoTokenizer``, with
``trajsynth serve --backend local --model DIR`` and with vLLM (``LlamaForCausalLM``; the call
tags are single tokens, as vLLM's ``hermes`` tool parser needs). Llama rather than Qwen2:
transformers 5 loads any ``qwen2`` folder with its own Qwen2 tokenizer class, which replaces
the pre-tokenizer this tokenizer was trained with; for ``llama`` it keeps ``tokenizer.json``.

Steps of :func:`build_tiny`:

1) render every training conversation with the chat template (:mod:`.template`);
2) train a byte-level BPE on those texts with the ``tokenizers`` library. Pre-tokenization
   splits words (letters and ``_``), digit runs of up to 3, runs of punctuation (with one
   leading space) and each newline apart, and never glues a space to the front of a word. So a
   value reads as the same token in the user's prose (``to Paris``) and in the call's JSON
   (``"city": "Paris"``), and a tiny model can learn to copy it. The chat control tokens
   (``<|im_start|>``, ``<|im_end|>``, ``<|endoftext|>``) are special; the tags ``<tool_call>``,
   ``</tool_call>``, ``<tool_response>``, ... are single added tokens kept in decoded text;
3) build the model from :class:`TinyConfig` (default about 1.1M parameters) with tied
   embeddings, seeded;
4) save model, tokenizer, chat template and a generation config whose EOS is ``<|im_end|>``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from ..core.config import StrictModel
from ..core.schema import Trajectory
from .template import ADDED_TOKENS, BOS, EOS, PAD, SPECIAL_TOKENS, chat_template, row_messages

__all__ = [
    "PRETOKENIZE_PATTERN",
    "TinyConfig",
    "build_model",
    "build_tiny",
    "conversation_texts",
    "new_student",
    "save_tokenizer",
    "train_tokenizer",
]

#: newline | word | up to 3 digits | punctuation run with one optional leading space | spaces
PRETOKENIZE_PATTERN = r"\n|[\p{L}\p{M}_]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}_]+|[^\S\n]+"


class TinyConfig(StrictModel):
    """Size and shape of the tiny student (defaults: ~1.1M parameters with a 2048 vocabulary)."""

    vocab_size: int = Field(
        default=2048, ge=300, description="BPE vocabulary size (bytes + specials + merges)."
    )
    hidden_size: int = Field(default=128, ge=16, description="Width d of the residual stream.")
    num_layers: int = Field(default=4, ge=1, description="Transformer blocks.")
    num_heads: int = Field(default=4, ge=1, description="Attention heads (head_dim = d / heads).")
    num_kv_heads: int = Field(default=4, ge=1, description="Key/value heads (GQA when < heads).")
    intermediate_size: int = Field(default=384, ge=16, description="MLP width (SwiGLU).")
    max_position_embeddings: int = Field(default=2048, ge=64, description="Longest sequence.")
    rope_theta: float = Field(default=10000.0, gt=0, description="RoPE base.")
    tool_format: Literal["signature", "described", "json"] = Field(
        default="signature",
        description="How the chat template writes tools: one compact signature line per tool "
        "(short prompts for a CPU-sized model), that line and one per described parameter, "
        "or Qwen's full JSON schema per tool.",
    )
    seed: int = Field(default=0, description="Seed of the weight initialisation.")

    def param_estimate(self) -> int:
        """Parameters of the model this config builds (tied embeddings).

        >>> TinyConfig().param_estimate()
        1115264
        """
        d, v, f = self.hidden_size, self.vocab_size, self.intermediate_size
        head_dim = d // self.num_heads
        kv = self.num_kv_heads * head_dim
        attn = d * d * 2 + d * kv * 2
        block = attn + 3 * d * f + 2 * d
        return v * d + self.num_layers * block + d


def conversation_texts(records: Iterable[Trajectory], template: str) -> Iterable[str]:
    """Step 1: each row rendered with the chat template (the tokenizer's training text)."""
    from transformers.utils.chat_template_utils import render_jinja_template

    for row in records:
        tools = row.tools or None
        # transformers annotates it `-> str`; it returns (rendered, generation_indices)
        rendered, _ = render_jinja_template(  # type: ignore[str-unpack]
            conversations=[row_messages(row)], tools=tools, chat_template=template
        )
        yield rendered[0]


def train_tokenizer(texts: Iterable[str], vocab_size: int, template: str) -> Any:
    """Step 2: a byte-level BPE trained on ``texts``, wrapped as a transformers fast tokenizer
    with the chat template, special and added tokens."""
    import re

    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    # the turn markers are special (dropped by skip_special_tokens); the call and response
    # tags are plain added tokens, kept in decoded text where parsers look for them
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED_TOKENS])
    # the trainer does not split on added tokens itself: cut them out so no merges are spent
    # on their pieces; each distinct piece counts once (a tool list repeated in every row
    # would otherwise dominate the counts, and training time)
    cut = re.compile("|".join(re.escape(t) for t in [*SPECIAL_TOKENS, *ADDED_TOKENS]))
    unique = dict.fromkeys(p for text in texts for p in cut.split(text) if p)

    def pieces() -> Iterable[str]:
        yield from unique

    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(pieces(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS,
        pad_token=PAD,
        model_max_length=1_000_000,
        clean_up_tokenization_spaces=False,
    )

    fast.chat_template = template
    fast.padding_side = "right"
    return fast


def build_model(cfg: TinyConfig, tokenizer: Any) -> Any:
    """Step 3: a randomly initialised causal LM (seeded) sized by ``cfg``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    common: dict[str, Any] = {
        "vocab_size": len(tokenizer),
        "hidden_size": cfg.hidden_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "intermediate_size": cfg.intermediate_size,
        "max_position_embeddings": cfg.max_position_embeddings,
        "rope_theta": cfg.rope_theta,
        "tie_word_embeddings": True,
        "bos_token_id": tokenizer.convert_tokens_to_ids(BOS),
        "eos_token_id": tokenizer.convert_tokens_to_ids(EOS),
        "pad_token_id": tokenizer.convert_tokens_to_ids(PAD),
        "initializer_range": 0.02,
    }
    torch.manual_seed(cfg.seed)
    return LlamaForCausalLM(LlamaConfig(**common))


def new_student(records: Sequence[Trajectory], cfg: TinyConfig | None = None) -> tuple[Any, Any]:
    """Steps 1-3: (model, tokenizer), the tokenizer trained on ``records``."""
    from transformers import GenerationConfig

    cfg = cfg or TinyConfig()
    template = chat_template(cfg.tool_format)
    # 1-2) tokenizer on the rendered conversations
    tokenizer = train_tokenizer(conversation_texts(records, template), cfg.vocab_size, template)
    # 3) model, with a generation config that stops at the end of a turn
    model = build_model(cfg, tokenizer)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.convert_tokens_to_ids(EOS),
        pad_token_id=tokenizer.convert_tokens_to_ids(PAD),
        bos_token_id=model.config.bos_token_id,
    )
    return model, tokenizer


def build_tiny(
    records: Sequence[Trajectory], out: str | Path, cfg: TinyConfig | None = None
) -> Path:
    """Steps 1-4: train the tokenizer on ``records``, build the model, save both to ``out``."""
    model, tokenizer = new_student(records, cfg)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    save_tokenizer(tokenizer, out)
    return out


def save_tokenizer(tokenizer: Any, out: str | Path) -> None:
    """Save the tokenizer under a class name every transformers version knows (4.x and 5.x),
    so ``AutoTokenizer`` keeps this ``tokenizer.json`` as it is."""
    import json

    tokenizer.save_pretrained(out)
    path = Path(out) / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
