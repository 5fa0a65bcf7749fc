"""``backend: local`` — a transformers causal LM loaded from a folder (the student trajsynth
trains, or any HF checkpoint on disk; nothing is downloaded).

For each request:

1. render the prompt with the tokenizer's chat template, passing the tools (``tools=``), and
   assistant tool calls with their arguments as objects (the Hugging Face convention);
2. queue it; a batcher waits up to ``batch_wait_ms`` for more requests with the same sampling
   settings and generates up to ``batch_size`` prompts at once, left-padded, in a worker
   thread (one generation at a time; the event loop stays free);
3. return each sequence's text (special tokens such as ``<tool_call>`` kept, end-of-turn and
   padding removed), its token ids (training keeps generated ids, never re-tokenized text),
   and, when asked, each token's log-probability under the model's raw distribution (before
   temperature/top-p), computed step by step so memory stays O(batch × vocabulary).

Tool calls are then read from the text by the shared parser (``parsing.py``), like every
backend's. Sampling (temperature > 0) is seeded per batch with the first request's seed, so
it is reproducible for the same batch; greedy decoding (temperature 0) is deterministic. The
default temperature is 1.0, as in the OpenAI API.
"""

from __future__ import annotations

import asyncio
import json
import threading
import weakref
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError, EndpointError
from .base import Backend, BackendReply, ChatRequest, RawChoice, RoleConfig, TokenLogprob, Usage
from .chat_template import chat_template, needs_tool_template
from .models import MODELS, resolve_model

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

    def __init__(self, config: RoleConfig) -> None:
        self.config = config
        self.settings = config.local
        model = config.model
        if model in MODELS:  # a registered name (e.g. smollm2-135m): its prepared folder
            model = resolve_model(model)
        self.path = Path(model).expanduser()
        if not config.model or not self.path.is_dir():
            raise ConfigError(
                f"local backend: model folder {config.model!r} does not exist",
                hint="set `model:` to a folder with config.json, weights and a tokenizer",
            )
        self._model: Any = None
        self._tok: Any = None
        self._load_lock = threading.Lock()
        self._gen_lock = threading.Lock()
        self._batchers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Batcher] = (
            weakref.WeakKeyDictionary()
        )
        #: generate() calls and prompts generated, for tests and the server's counters
        self.stats = {"batches": 0, "prompts": 0}

    def fingerprint(self) -> dict[str, Any]:
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
                model.to(self.settings.device).eval()
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
            if self.settings.batch_wait_ms and len(batcher.pending) < self.settings.batch_size:
                await asyncio.sleep(self.settings.batch_wait_ms / 1000.0)
            head = batcher.pending[0][0]
            key = _sampling_key(head)
            group, rest = [], []
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
    def generate(self, requests: list[ChatRequest]) -> list[BackendReply]:
        """Generate for requests that share sampling settings; one reply per request."""
        import torch

        tok, model = self.load()
        first = requests[0]
        n = first.n
        temperature = 1.0 if first.temperature is None else first.temperature
        max_new = first.max_tokens or self.settings.max_new_tokens
        prompts = []
        for r in requests:
            try:
                prompts.append(
                    tok.apply_chat_template(
                        _hf_messages(r.messages),
                        tools=r.tools or None,
                        add_generation_prompt=True,
                        tokenize=False,
                    )
                )
            except Exception as exc:  # a template that cannot render these messages
                raise EndpointError(f"chat template failed: {type(exc).__name__}: {exc}") from exc
        enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        enc = {k: v.to(model.device) for k, v in enc.items()}
        kwargs: dict[str, Any] = {
            "max_new_tokens": max_new,
            "num_return_sequences": n,
            "return_dict_in_generate": True,
            "output_logits": bool(first.logprobs),
            "pad_token_id": tok.pad_token_id,
            "eos_token_id": tok.eos_token_id,
        }
        if temperature > 0:
            kwargs.update(do_sample=True, temperature=temperature, top_p=first.top_p or 1.0)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        with self._gen_lock, torch.no_grad():
            if first.seed is not None:
                torch.manual_seed(first.seed)
            out = model.generate(**enc, **kwargs)
            self.stats["batches"] += 1
            self.stats["prompts"] += len(requests)
        prompt_len = enc["input_ids"].shape[1]
        gen = out.sequences[:, prompt_len:]  # (B*n, T)
        token_lp = None
        top_lp: list[Any] = []
        if first.logprobs and out.logits:
            lps = []
            for t, step_logits in enumerate(out.logits):  # each (B*n, V)
                logp = torch.log_softmax(step_logits.float(), dim=-1)
                lps.append(logp.gather(1, gen[:, t : t + 1]).squeeze(1))
                if first.top_logprobs:
                    top_lp.append(torch.topk(logp, first.top_logprobs, dim=-1))
            token_lp = torch.stack(lps, dim=1)  # (B*n, T)
        stops = {tok.eos_token_id, tok.pad_token_id}
        replies = []
        for i, r in enumerate(requests):
            choices, completion = [], 0
            for j in range(n):
                row = i * n + j
                ids = gen[row].tolist()
                end = next((k for k, x in enumerate(ids) if x in stops), None)
                finish = "length" if end is None else "stop"
                ids = ids if end is None else ids[:end]
                text = tok.decode(ids, skip_special_tokens=False)
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
            prompt_tokens = int(enc["attention_mask"][i].sum())
            replies.append(
                BackendReply(
                    choices=choices,
                    usage=Usage(prompt_tokens=prompt_tokens, completion_tokens=completion),
                    model=self.path.name,
                )
            )
        return replies


def _sampling_key(r: ChatRequest) -> tuple[Any, ...]:
    return (r.n, r.temperature, r.top_p, r.max_tokens, r.logprobs, r.top_logprobs)
