"""``backend: local`` — a transformers causal LM loaded from a folder (the student trajsynth
trains, or any HF checkpoint on disk; nothing is downloaded), or a model already in memory
(:meth:`LocalBackend.from_model`: the policy GRPO is training). It is the one way trajsynth
plays a checkpoint: ``trajsynth serve --backend local``, a stage's ``ctx.use_checkpoint``
(HardGen, GCP), evaluation and GRPO rollouts all go through it.

For each request:

1. the prompt: the request's ``prompt_token_ids`` as given (token in: an episode that keeps
   the ids the model generated, :mod:`trajsynth.envs.episode`), or else the messages rendered
   with the tokenizer's chat template, passing the tools (``tools=``), and assistant tool
   calls with their arguments as objects (the Hugging Face convention);
2. queue it; a batcher lets every request that is ready join, waits up to ``batch_wait_ms``
   for more with the same sampling settings and generates up to ``batch_size`` prompts at
   once, left-padded, in a worker thread (one generation at a time; the event loop stays
   free; the model is put in eval mode for it and back);
3. prompts that share a prefix with an earlier prompt or reply (an episode's growing
   history, a shared system prompt and tool list) reuse its attention keys and values
   (:mod:`.prefix_cache`; ``prefix_cache_mb``), for a model loaded from a folder only; the
   generated text is the same as without;
4. decoding follows the request alone (OpenAI semantics, not the model's generation
   config): greedy at temperature 0, else sampling with ``temperature`` and ``top_p``; it
   stops on the tokenizer's end-of-sequence token or any of the model's configured ones;
5. return each sequence's text (special tokens such as ``<tool_call>`` kept, end-of-turn and
   padding removed), its token ids as generated (the end-of-turn token included when the
   model stopped on it: training keeps generated ids, never re-tokenized text), and, when
   asked, each of those tokens' log-probability under the model's raw distribution (before
   temperature/top-p), recorded one step behind by a logits processor so memory stays
   O(batch × vocabulary).

Tool calls are then read from the text by the shared parser (``parsing.py``), like every
backend's. Sampling (temperature > 0) is seeded per batch with the first request's seed, so
it is reproducible for the same batch; greedy decoding (temperature 0) is deterministic. The
default temperature is 1.0, as in the OpenAI API.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import weakref
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError, EndpointError
from .base import Backend, BackendReply, ChatRequest, RawChoice, RoleConfig, TokenLogprob, Usage
from .chat_template import chat_template, needs_tool_template
from .models import MODELS, resolve_model
from .prefix_cache import PrefixCache, Reuse

__all__ = ["LocalBackend"]


def _hf_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI messages → the form HF chat templates expect (arguments as objects)."""
    out = []
    for m in messages:
        d = dict(m)
        if d.get("tool_calls"):
            calls = []
            for tc in d["tool_calls"]:
                fn = dict(tc.get("function") or {})
                args = fn.get("arguments")
                if isinstance(args, str):
                    try:
                        fn["arguments"] = json.loads(args) if args.strip() else {}
                    except ValueError:
                        fn["arguments"] = args
                calls.append({**tc, "function": fn})
            d["tool_calls"] = calls
        if d.get("content") is None:
            d["content"] = ""
        out.append(d)
    return out


class _Batcher:
    """Pending requests of one event loop and the task that drains them."""

    def __init__(self) -> None:
        self.pending: list[tuple[ChatRequest, asyncio.Future[BackendReply]]] = []
        self.task: asyncio.Task[None] | None = None


class LocalBackend(Backend):
    """A local transformers model (see the module docstring)."""

    name = "local"

    def __init__(self, config: RoleConfig, *, model: Any = None, tokenizer: Any = None) -> None:
        self.config = config
        self.settings = config.local
        name = config.model
        if name in MODELS:  # a registered name (e.g. smollm2-135m): its prepared folder
            name = resolve_model(name)
        self.path = Path(name).expanduser()
        if model is None and (not config.model or not self.path.is_dir()):
            raise ConfigError(
                f"local backend: model folder {config.model!r} does not exist",
                hint="set `model:` to a folder with config.json, weights and a tokenizer",
            )
        self._model: Any = model
        self._tok: Any = tokenizer
        self._in_memory = model is not None
        self._load_lock = threading.Lock()
        self._gen_lock = threading.Lock()
        self._batchers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Batcher] = (
            weakref.WeakKeyDictionary()
        )
        #: generate() calls and prompts generated, for tests and the server's counters
        self.stats = {"batches": 0, "prompts": 0}
        # step 3: only for weights that do not change (not a policy being trained in memory)
        budget = self.settings.prefix_cache_mb * 2**20
        self.prefix_cache = PrefixCache(budget) if budget and not self._in_memory else None

    @classmethod
    def from_model(
        cls,
        model: Any,
        tokenizer: Any,
        *,
        name: str = "student",
        device: str = "cpu",
        autocast: str = "none",
        batch_size: int = 64,
        max_new_tokens: int = 256,
    ) -> LocalBackend:
        """A backend over a model in memory (e.g. the policy being trained), already on
        ``device``; ``autocast="bf16"`` generates under bf16 autocast."""
        config = RoleConfig.model_validate(
            {
                "backend": "local",
                "model": name,
                "cache": False,
                "local": {
                    "device": device,
                    "autocast": autocast,
                    "batch_size": batch_size,
                    "batch_wait_ms": 0,
                    "max_new_tokens": max_new_tokens,
                },
            }
        )
        return cls(config, model=model, tokenizer=tokenizer)

    @property
    def tokenizer(self) -> Any:
        return self.load()[0]

    def fingerprint(self) -> dict[str, Any]:
        if self._in_memory:
            return {"in_memory": id(self._model)}
        files = sorted(
            (p.name, p.stat().st_size, p.stat().st_mtime_ns)
            for p in self.path.iterdir()
            if p.is_file()
        )
        return {"files": files}

    # -- loading -----------------------------------------------------------------------------
    def load(self) -> tuple[Any, Any]:
        """Load tokenizer and model once (thread-safe); returns (tokenizer, model)."""
        with self._load_lock:
            if self._model is None:
                try:
                    import torch
                    from transformers import AutoModelForCausalLM, AutoTokenizer
                except ImportError as exc:
                    raise ConfigError(
                        "backend: local needs torch and transformers",
                        hint="pip install 'trajsynth[train]'",
                    ) from exc
                from transformers.utils import logging as hf_logging

                hf_logging.disable_progress_bar()  # no bars in a server's or a stage's log
                try:
                    tok = AutoTokenizer.from_pretrained(str(self.path))
                    dtype = (
                        "auto"
                        if self.settings.dtype == "auto"
                        else getattr(torch, self.settings.dtype)
                    )
                    model = AutoModelForCausalLM.from_pretrained(str(self.path), dtype=dtype)
                except (OSError, ValueError) as exc:
                    raise ConfigError(f"local backend: cannot load {self.path}: {exc}") from exc
                tok.padding_side = "left"
                if tok.pad_token_id is None:
                    tok.pad_token = tok.eos_token
                if getattr(tok, "chat_template", None) is None:
                    raise ConfigError(f"local backend: {self.path} has no chat template")
                if needs_tool_template(tok.chat_template):  # ChatML that cannot show tools
                    tok.chat_template = chat_template()
                # transformers types .to's first argument as a model; torch's takes a device
                model.to(self.settings.device).eval()  # type: ignore[arg-type]
                self._tok, self._model = tok, model
            return self._tok, self._model

    # -- batching ----------------------------------------------------------------------------
    async def complete(self, request: ChatRequest) -> BackendReply:
        loop = asyncio.get_running_loop()
        batcher = self._batchers.get(loop)
        if batcher is None:
            batcher = self._batchers[loop] = _Batcher()
        fut: asyncio.Future[BackendReply] = loop.create_future()
        batcher.pending.append((request, fut))
        if batcher.task is None or batcher.task.done():
            batcher.task = loop.create_task(self._drain(batcher))
        return await fut

    async def _drain(self, batcher: _Batcher) -> None:
        while batcher.pending:
            for _ in range(3):  # every coroutine that is ready queues its request
                await asyncio.sleep(0)
            if self.settings.batch_wait_ms and len(batcher.pending) < self.settings.batch_size:
                await asyncio.sleep(self.settings.batch_wait_ms / 1000.0)
            head = batcher.pending[0][0]
            key = _sampling_key(head)
            group: list[tuple[ChatRequest, asyncio.Future[BackendReply]]] = []
            rest: list[tuple[ChatRequest, asyncio.Future[BackendReply]]] = []
            for item in batcher.pending:
                if len(group) < self.settings.batch_size and _sampling_key(item[0]) == key:
                    group.append(item)
                else:
                    rest.append(item)
            batcher.pending = rest
            try:
                replies = await asyncio.to_thread(self.generate, [r for r, _ in group])
            except Exception as exc:
                err = (
                    exc
                    if isinstance(exc, EndpointError)
                    else EndpointError(
                        f"local model {self.path.name}: generation failed: "
                        f"{type(exc).__name__}: {exc}"
                    )
                )
                for _, fut in group:
                    if not fut.done():
                        fut.set_exception(err)
                continue
            for (_, fut), reply in zip(group, replies, strict=True):
                if not fut.done():
                    fut.set_result(reply)

    # -- generation (worker thread) ----------------------------------------------------------
    def stop_ids(self) -> list[int]:
        """The ids generation stops on: the tokenizer's end of sequence and the model's."""
        tok, model = self.load()
        ids = {tok.eos_token_id}
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        ids |= set(gen_eos if isinstance(gen_eos, list) else [gen_eos] if gen_eos else [])
        return sorted(i for i in ids if i is not None)

    def _prompt_ids(self, request: ChatRequest) -> list[int]:
        """Step 1."""
        if request.prompt_token_ids is not None:
            return list(request.prompt_token_ids)
        tok = self._tok
        try:
            text = tok.apply_chat_template(
                _hf_messages(request.messages),
                tools=request.tools or None,
                add_generation_prompt=True,
                tokenize=False,
            )
        except Exception as exc:  # a template that cannot render these messages
            raise EndpointError(f"chat template failed: {type(exc).__name__}: {exc}") from exc
        return list(tok(text, add_special_tokens=False)["input_ids"])

    def generate(self, requests: list[ChatRequest]) -> list[BackendReply]:
        """Generate for requests that share sampling settings; one reply per request."""
        import torch
        from transformers import GenerationConfig, LogitsProcessorList

        tok, model = self.load()
        first = requests[0]
        n = first.n
        temperature = 1.0 if first.temperature is None else first.temperature
        max_new = first.max_tokens or self.settings.max_new_tokens
        stop_ids = self.stop_ids()
        pad_id = tok.pad_token_id if tok.pad_token_id is not None else stop_ids[0]
        # 1-3) the prompts; a reused prefix right-aligned in the first `cached` columns, the
        # tokens still to compute right-aligned after it (both left-padded, the mask says where)
        prompts = [self._prompt_ids(r) for r in requests]
        prefix = self.prefix_cache if n == 1 else None
        reuses: list[Reuse | None] = [
            prefix.lookup(p) if prefix is not None else None for p in prompts
        ]
        lengths = [r.length if r is not None else 0 for r in reuses]
        cached = max(lengths)
        width = cached + max(len(p) - c for p, c in zip(prompts, lengths, strict=True))
        input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)  # (B, T)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)  # (B, T)
        for i, (p, c) in enumerate(zip(prompts, lengths, strict=True)):
            if c:
                input_ids[i, cached - c : cached] = torch.tensor(p[:c], dtype=torch.long)
                attention[i, cached - c : cached] = 1
            input_ids[i, width - (len(p) - c) :] = torch.tensor(p[c:], dtype=torch.long)
            attention[i, width - (len(p) - c) :] = 1
        extra: dict[str, Any] = {}
        if cached:
            extra[_cache_kwarg(model)] = PrefixCache.batch_cache(reuses, cached)
        # 4) decoding as the request says
        sample = temperature > 0
        gen_cfg = GenerationConfig(
            max_new_tokens=max_new,
            num_return_sequences=n,
            do_sample=sample,
            temperature=temperature if sample else None,
            top_p=(first.top_p or 1.0) if sample else None,
            top_k=None,
            eos_token_id=stop_ids,
            pad_token_id=pad_id,
            return_dict_in_generate=True,
        )
        recorder = _LogprobRecorder(first.top_logprobs or 0) if first.logprobs else None
        device = self.settings.device
        with self._gen_lock, torch.no_grad(), _autocast(device, self.settings.autocast):
            was_training = model.training
            model.eval()
            try:
                if first.seed is not None:
                    torch.manual_seed(first.seed)
                out = model.generate(
                    input_ids=input_ids.to(model.device),
                    attention_mask=attention.to(model.device),
                    generation_config=gen_cfg,
                    logits_processor=LogitsProcessorList([recorder] if recorder else []),
                    **extra,
                )
            finally:
                model.train(was_training)
            self.stats["batches"] += 1
            self.stats["prompts"] += len(requests)
        gen = out.sequences[:, width:]  # (B*n, T)
        token_lp = top_lp = None
        if recorder is not None:
            token_lp, top_lp = recorder.finish(out.sequences)
        if prefix is not None:
            self._keep_prefixes(prefix, out, prompts, attention, width, set(stop_ids))
        # 5) text, ids and log-probabilities per choice
        stops = set(stop_ids)
        replies = []
        for i, r in enumerate(requests):
            choices, completion = [], 0
            for j in range(n):
                row = i * n + j
                ids = gen[row].tolist()
                end = next((k for k, x in enumerate(ids) if x in stops), None)
                finish = "length" if end is None else "stop"
                ids = ids if end is None else ids[: end + 1]
                text = tok.decode(ids if end is None else ids[:-1], skip_special_tokens=False)
                if r.stop:
                    cut = min((text.find(s) for s in r.stop if s in text), default=-1)
                    if cut >= 0:
                        text, finish = text[:cut], "stop"
                logprobs = None
                if token_lp is not None:
                    logprobs = []
                    for k, tid in enumerate(ids):
                        top = []
                        if top_lp:
                            vals, idx = top_lp[k]
                            top = [
                                (tok.decode([int(a)]), float(b))
                                for a, b in zip(idx[row].tolist(), vals[row].tolist(), strict=True)
                            ]
                        logprobs.append(
                            TokenLogprob(
                                token=tok.decode([tid]), logprob=float(token_lp[row, k]), top=top
                            )
                        )
                completion += len(ids)
                choices.append(
                    RawChoice(content=text, finish_reason=finish, logprobs=logprobs, token_ids=ids)
                )
            replies.append(
                BackendReply(
                    choices=choices,
                    usage=Usage(prompt_tokens=len(prompts[i]), completion_tokens=completion),
                    model=self.path.name,
                )
            )
        return replies

    @staticmethod
    def _keep_prefixes(
        prefix: PrefixCache,
        out: Any,
        prompts: list[list[int]],
        attention: Any,
        width: int,
        stops: set[int],
    ) -> None:
        """Step 3's store: each row's prompt and reply (up to its stop token, whose keys
        were never computed) with their keys and values."""
        import torch

        cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
        if cache is None:
            return
        gen = out.sequences[:, width:]
        for i, p in enumerate(prompts):
            ids = gen[i].tolist()
            end = next((k for k, x in enumerate(ids) if x in stops), len(ids) - 1)
            reply = ids[:end]  # the tokens fed back into the model, in order
            keep = torch.cat(
                [
                    torch.nonzero(attention[i]).flatten(),
                    torch.arange(width, width + len(reply), dtype=torch.long),
                ]
            ).to(out.sequences.device)
            prefix.store(p + reply, PrefixCache.row_layers(cache, i, keep))


class _LogprobRecorder:
    """A logits processor that keeps the log-probability of each generated token (and the
    ``top`` most likely alternatives) under the scores it is given, one step behind (the
    token chosen at step t is the last input id at step t + 1), so only one step's
    distribution is held at a time."""

    def __init__(self, top: int) -> None:
        self.top = top
        self.prev: Any = None
        self.chosen: list[Any] = []
        self.tops: list[Any] = []

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        if self.prev is not None:
            self._take(input_ids[:, -1])
        self.prev = torch.log_softmax(scores.float(), dim=-1)  # (B*n, V)
        return scores

    def _take(self, tokens: Any) -> None:
        self.chosen.append(self.prev.gather(1, tokens[:, None]).squeeze(1))  # (B*n,)
        if self.top:
            self.tops.append(self.prev.topk(self.top, dim=-1))
        self.prev = None

    def finish(self, sequences: Any) -> tuple[Any, list[Any]]:
        """(B*n, T) log-probabilities of the generated tokens, and the top alternatives."""
        import torch

        if self.prev is not None:
            self._take(sequences[:, -1])
        return torch.stack(self.chosen, dim=1), self.tops


def _autocast(device: str, kind: str) -> contextlib.AbstractContextManager[Any]:
    if kind == "bf16":
        import torch

        return torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _cache_kwarg(model: Any) -> str:
    """``generate``'s name for a cache passed in: ``cache`` in the transformers releases whose
    outputs carry one (``past_key_values`` before, deprecated since)."""
    from transformers.generation.utils import GenerateDecoderOnlyOutput

    fields = getattr(GenerateDecoderOnlyOutput, "__dataclass_fields__", {})
    return "cache" if "cache" in fields else "past_key_values"


def _sampling_key(r: ChatRequest) -> tuple[Any, ...]:
    return (r.n, r.temperature, r.top_p, r.max_tokens, r.logprobs, r.top_logprobs)
