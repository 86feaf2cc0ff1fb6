import hashlib
import subprocess
import sys

import pytest
from transformers import AutoTokenizer

from engine.testing.tiny_model import make_tiny_model


def _digest(path):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir())}


def test_same_seed_same_bytes_other_seed_other_weights(tmp_path):
    a = _digest(make_tiny_model(tmp_path / "a", arch="llama", seed=0))
    b = _digest(make_tiny_model(tmp_path / "b", arch="llama", seed=0))
    c = _digest(make_tiny_model(tmp_path / "c", arch="llama", seed=1))
    assert a == b
    assert a["model.safetensors"] != c["model.safetensors"]
    assert a["tokenizer.json"] == c["tokenizer.json"]


def test_tokenizer_is_a_real_trained_bpe(tiny_qwen3):
    tok = AutoTokenizer.from_pretrained(tiny_qwen3)
    assert 400 <= len(tok) <= 1000
    ids = tok.encode("def __init__(self, parser):", add_special_tokens=False)
    assert len(ids) < len("def __init__(self, parser):") / 2  # merges learned from Python source
    assert tok.decode(ids) == "def __init__(self, parser):"
    assert tok.chat_template and tok.eos_token == "<|im_end|>"


def test_bad_arguments_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="unknown arch"):
        make_tiny_model(tmp_path, arch="gpt2")
    with pytest.raises(ValueError, match="unknown dtype"):
        make_tiny_model(tmp_path, dtype="int8")


def test_cli_writes_a_checkpoint_and_has_help(tmp_path):
    run = [sys.executable, "-m", "chassis", "make-tiny-model"]
    assert "--arch" in subprocess.run([*run, "--help"], capture_output=True, text=True, check=True).stdout
    out = subprocess.run(
        [*run, str(tmp_path / "m"), "--arch", "mistral", "--seed", "3"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "m" / "config.json").is_file() and (tmp_path / "m" / "model.safetensors").is_file()
    bad = subprocess.run([*run, str(tmp_path / "x"), "--arch", "bert"], capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr
