"""Models by name (``trajsynth.llm.models``, ``trajsynth models``): the cache location, every
kind of bad input as one message and a non-zero exit, and SmolLM2 prepared once from its
wheel into a folder that transformers loads (a session fixture converts it into a temporary
cache, ~40 s on a quiet 2-core machine).

Run: PYTHONPATH=. python -m pytest tests/llm/test_models.py -q
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from trajsynth.cli import main
from trajsynth.core.errors import ConfigError
from trajsynth.llm.chat_template import needs_tool_template
from trajsynth.llm.models import (
    MARKER,
    cache_dir,
    check_model_folder,
    convert_gguf,
    model_status,
    pull,
    resolve_model,
)


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """The CLI in this process: (exit code, stdout, stderr)."""
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TRAJSYNTH_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_cache_dir_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRAJSYNTH_HOME", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "trajsynth" / "models"
    monkeypatch.setenv("TRAJSYNTH_HOME", str(tmp_path / "th"))
    assert cache_dir() == tmp_path / "th" / "models"


def test_tiny_is_a_name_with_nothing_to_prepare(home: Path) -> None:
    assert resolve_model("tiny") == "tiny"
    assert pull("tiny") is None
    assert model_status("tiny") == "built from data"


def test_unknown_name_is_one_message(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match="unknown model 'gpt-9'"):
        resolve_model("gpt-9")
    code, _, err = run_cli(capsys, "models", "pull", "gpt-9")
    assert code == 2 and "unknown model 'gpt-9'" in err and "smollm2-135m" in err
    assert "Traceback" not in err


def test_folder_without_weights(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "empty_model"
    folder.mkdir()
    with pytest.raises(ConfigError, match=r"no config\.json"):
        check_model_folder(folder)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ConfigError, match="has no weights"):
        resolve_model(str(folder))
    out = str(tmp_path / "o")
    code, _, err = run_cli(
        capsys, "train-sft", str(tmp_path / "data"), "--out", out, "--model", str(folder)
    )
    assert code == 2 and f"{folder} has no weights" in err.replace("\n", "")


def test_half_written_cache_is_never_used(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a folder in the cache without its completion marker (a conversion that did not finish)
    entry = home / "models" / "smollm2-135m"
    entry.mkdir(parents=True)
    (entry / "config.json").write_text("{}")
    (entry / "model.safetensors").write_bytes(b"")
    assert model_status("smollm2-135m") == "half-written"
    with pytest.raises(ConfigError, match="half-written"):
        resolve_model("smollm2-135m")
    with pytest.raises(ConfigError, match="half-written"):
        check_model_folder(entry)
    code, _, err = run_cli(capsys, "serve", "--backend", "local", "--model", "smollm2-135m")
    assert code == 2 and "half-written" in err and "--force" in err


def test_killed_conversion_leaves_only_a_temporary_folder(home: Path) -> None:
    """What a killed conversion leaves (its temporary folder) is not an entry."""
    tmp = home / "models" / f".smollm2-135m.tmp-{2**22 + 12345}"
    tmp.mkdir(parents=True)
    (tmp / "config.json").write_text("{}")
    assert model_status("smollm2-135m") in {"not prepared", "not installed"}
    with pytest.raises(ConfigError):
        resolve_model("smollm2-135m", prepare=False)


def test_gguf_of_an_unknown_architecture(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    pytest.importorskip("transformers")
    import numpy as np

    path = tmp_path / "odd.gguf"
    writer = gguf.GGUFWriter(str(path), arch="nonesuch")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    out = tmp_path / "cache" / "odd"
    with pytest.raises(ConfigError, match=re.escape(f"cannot load the GGUF file {path}")):
        convert_gguf(path, out)
    assert not out.exists()


def test_hub_id_without_network(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(home / "hf"))
    with pytest.raises(ConfigError, match="the hub could not provide it"):
        resolve_model("nobody-here/no-such-model")


def test_models_list(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "models", "list", "--json")
    rows = {r["name"]: r for r in map(json.loads, out.splitlines())}
    assert code == 0 and set(rows) == {"tiny", "smollm2-135m"}
    assert rows["smollm2-135m"]["status"] in {"not prepared", "not installed"}
    assert rows["smollm2-135m"]["folder"] == str(home / "models" / "smollm2-135m")


# -- the real model --------------------------------------------------------------------------


def test_smollm2_prepared_once(smollm2: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert json.loads((smollm2 / MARKER).read_text())["gguf"].endswith(".gguf")
    assert model_status("smollm2-135m") == "ready"
    stamp = (smollm2 / "model.safetensors").stat().st_mtime_ns
    code, out, _ = run_cli(capsys, "models", "pull", "smollm2-135m")  # reused, not converted
    assert code == 0 and out.strip() == str(smollm2)
    assert (smollm2 / "model.safetensors").stat().st_mtime_ns == stamp
    assert resolve_model("smollm2-135m") == str(smollm2)
    # a plain transformers folder: no GGUF quantization left, ChatML with the tool template
    tok = AutoTokenizer.from_pretrained(str(smollm2))
    model = AutoModelForCausalLM.from_pretrained(str(smollm2))
    assert getattr(model.config, "quantization_config", None) is None
    assert tok.eos_token == "<|im_end|>" and not needs_tool_template(tok.chat_template)
    tools = [{"type": "function", "function": {"name": "add", "parameters": {}}}]
    text = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tools=tools, tokenize=False, add_generation_prompt=True
    )
    assert "<tools>\nadd()" in text and text.endswith("<|im_start|>assistant\n")
    # it is the pretrained model: it knows a fact, greedily
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    out_ids = model.generate(**prompt, max_new_tokens=12, do_sample=False)
    answer = tok.decode(out_ids[0, prompt["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "Paris" in answer
    assert os.environ["TRAJSYNTH_HOME"] == str(smollm2.parent.parent)
