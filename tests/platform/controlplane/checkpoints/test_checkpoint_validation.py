import json

import pytest
from controlplane.checkpoints.models import Checkpoint
from controlplane.checkpoints.tasks import validate_checkpoint

pytestmark = pytest.mark.django_db


def test_tiny_checkpoint_validates_to_ready(tiny_model_dir):
    checkpoint = Checkpoint.objects.create(name="tiny", path=str(tiny_model_dir))
    assert validate_checkpoint(checkpoint.pk) == "ready"
    checkpoint.refresh_from_db()
    assert checkpoint.state == "ready" and checkpoint.reason == ""
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert checkpoint.architecture == config["architectures"][0]
    assert checkpoint.parameter_count > 1000 and checkpoint.dtype == "float32"
    assert checkpoint.size_bytes >= checkpoint.parameter_count * 4
    assert checkpoint.digest.startswith("sha256:") and len(checkpoint.digest) == 71
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    assert (
        checkpoint.kv_bytes_per_token
        == 2 * config["num_hidden_layers"] * config["num_key_value_heads"] * head_dim * 4
    )
    assert checkpoint.weight_bytes == 4 * checkpoint.parameter_count <= checkpoint.size_bytes
    assert (
        checkpoint.memory_per_replica_bytes
        == checkpoint.weight_bytes + checkpoint.kv_bytes_per_token * checkpoint.max_context
    )
    assert validate_checkpoint(checkpoint.pk) == "ready"  # validating again is harmless


def test_missing_shard_makes_it_invalid_with_reason(tiny_model_dir, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text((tiny_model_dir / "config.json").read_text())
    (broken / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"lm_head.weight": "model-00001-of-00002.safetensors"}})
    )
    checkpoint = Checkpoint.objects.create(name="broken", path=str(broken))
    assert validate_checkpoint(checkpoint.pk) == "invalid"
    checkpoint.refresh_from_db()
    assert checkpoint.state == "invalid"
    assert "lists shard 'model-00001-of-00002.safetensors', which is missing" in checkpoint.reason


def test_missing_directory_is_invalid(tmp_path):
    checkpoint = Checkpoint.objects.create(name="nowhere", path=str(tmp_path / "nope"))
    validate_checkpoint(checkpoint.pk)
    checkpoint.refresh_from_db()
    assert checkpoint.state == "invalid" and checkpoint.reason.endswith("no such directory")


def test_gguf_file_validates_like_its_safetensors_twin(tiny_model_dir, tmp_path):
    from engine.testing.tiny_gguf import write_gguf

    twin = Checkpoint.objects.create(name="tiny", path=str(tiny_model_dir))
    gguf_file = write_gguf(tiny_model_dir, tmp_path / "tiny.gguf")
    checkpoint = Checkpoint.objects.create(name="tiny-gguf", path=str(gguf_file))
    assert validate_checkpoint(twin.pk) == validate_checkpoint(checkpoint.pk) == "ready"
    twin.refresh_from_db()
    checkpoint.refresh_from_db()
    assert checkpoint.architecture == twin.architecture == "Qwen3ForCausalLM"
    assert checkpoint.parameter_count == twin.parameter_count and checkpoint.dtype == "float32"
    assert checkpoint.kv_bytes_per_token == twin.kv_bytes_per_token
    assert checkpoint.size_bytes == gguf_file.stat().st_size
    assert checkpoint.details["has_chat_template"] and checkpoint.details["has_tokenizer"]


def test_smollm2_gguf_validates_to_ready():
    from engine.testing.smollm2 import smollm2_path

    checkpoint = Checkpoint.objects.create(name="smollm2", path=str(smollm2_path().parent))
    assert validate_checkpoint(checkpoint.pk) == "ready"
    checkpoint.refresh_from_db()
    assert (checkpoint.architecture, checkpoint.dtype) == ("LlamaForCausalLM", "float32")
    assert 130_000_000 < checkpoint.parameter_count < 140_000_000
    assert checkpoint.max_context == 8192


def test_a_file_that_is_not_gguf_is_invalid(tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(b"\0" * 16)
    checkpoint = Checkpoint.objects.create(name="bin", path=str(path))
    assert validate_checkpoint(checkpoint.pk) == "invalid"
    checkpoint.refresh_from_db()
    assert checkpoint.reason.endswith("neither a directory nor a .gguf file")
