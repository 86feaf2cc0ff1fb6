"""GGUF checkpoints: a GGUF twin of a tiny safetensors checkpoint serves the same greedy tokens, and
broken or unsupported files are refused naming the problem."""

import shutil

import gguf
import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from engine import LLM, SamplingParams
from engine.checkpoint import CheckpointError, load_model_config
from engine.checkpoint.gguf_weights import unpermute_rotary_rows
from engine.checkpoint.inspect import inspect_checkpoint
from engine.checkpoint.weights import iter_weights
from engine.testing.tiny_gguf import _permute, write_gguf
from engine.tokenizer import Tokenizer
from tests.support.checkpoints import GGUF_TWIN_ARCHES

GREEDY = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
PROMPTS = ["def parse(self, text):", "import json\n\nclass Decoder:"]
CHAT = [{"role": "user", "content": "Format the <|im_end|> help text, héllo"}]


@pytest.mark.parametrize("arch", GGUF_TWIN_ARCHES)
def test_gguf_gives_the_greedy_tokens_of_its_safetensors_twin(gguf_twins, arch):
    model_dir, gguf_file = gguf_twins[arch]
    assert load_model_config(gguf_file) == load_model_config(model_dir)
    expected = [o.token_ids for o in LLM(model_dir, device="cpu").generate(PROMPTS, GREEDY)]
    assert [o.token_ids for o in LLM(gguf_file, device="cpu").generate(PROMPTS, GREEDY)] == expected


@pytest.mark.parametrize("arch", GGUF_TWIN_ARCHES)
def test_gguf_tokenizer_and_chat_template_match(gguf_twins, arch):
    model_dir, gguf_file = gguf_twins[arch]
    hf, ours = Tokenizer(model_dir), Tokenizer(gguf_file)
    assert ours.has_chat_template
    assert ours.apply_chat_template(CHAT) == hf.apply_chat_template(CHAT)
    assert ours.encode_chat(CHAT) == hf.encode_chat(CHAT)
    assert ours.eos_token_ids == hf.eos_token_ids


def test_quantized_gguf_serves_its_dequantized_weights(gguf_twins, tmp_path):
    model_dir, _ = gguf_twins["llama"]
    q8 = write_gguf(model_dir, tmp_path / "llama-q8_0.gguf", qtype="Q8_0")
    quantized = dict(iter_weights(q8))
    originals = dict(iter_weights(model_dir))
    assert quantized.keys() == originals.keys()
    for name, tensor in originals.items():  # Q8_0: one step is a 32-block's max / 127
        assert torch.allclose(quantized[name], tensor, atol=tensor.abs().max().item() / 127), name
    assert (
        quantized["model.layers.0.self_attn.q_proj.weight"]
        .ne(originals["model.layers.0.self_attn.q_proj.weight"])
        .any()
    )
    # The same weights as safetensors: the quantized file must serve exactly what they serve.
    dequantized = shutil.copytree(model_dir, tmp_path / "dequantized")
    save_file(quantized, str(dequantized / "model.safetensors"), metadata={"format": "pt"})
    expected = [o.token_ids for o in LLM(dequantized, device="cpu").generate(PROMPTS, GREEDY)]
    assert [o.token_ids for o in LLM(q8, device="cpu").generate(PROMPTS, GREEDY)] == expected


def test_a_directory_holding_one_gguf_file_is_a_checkpoint(gguf_twins, tmp_path):
    _, gguf_file = gguf_twins["qwen3"]
    shutil.copy(gguf_file, tmp_path / gguf_file.name)
    info = inspect_checkpoint(tmp_path)
    assert info.architecture == "Qwen3ForCausalLM" and info.num_weight_files == 1
    assert info.has_tokenizer and info.has_chat_template
    shutil.copy(gguf_file, tmp_path / "second.gguf")
    with pytest.raises(CheckpointError, match="holds 2 GGUF files"):
        load_model_config(tmp_path)


def test_inspection_counts_the_same_parameters_as_safetensors(gguf_twins):
    model_dir, gguf_file = gguf_twins["qwen2"]
    hf, ours = inspect_checkpoint(model_dir), inspect_checkpoint(gguf_file)
    assert (ours.architecture, ours.num_parameters, ours.dtype) == (
        hf.architecture,
        hf.num_parameters,
        "float32",
    )
    assert ours.kv_bytes_per_token == hf.kv_bytes_per_token
    assert ours.size_bytes == gguf_file.stat().st_size


@pytest.mark.parametrize(
    ("arch", "tensor", "problem"),
    [
        ("phi2", "token_embd.weight", "unsupported GGUF architecture 'phi2'; supported: llama, qwen2, qwen3"),
        ("llama", "rope_freqs.weight", "RoPE frequency factors \\(rope_freqs\\) are not supported"),
    ],
)
def test_unsupported_files_are_refused_naming_why(tmp_path, arch, tensor, problem):
    path = tmp_path / "model.gguf"
    writer = gguf.GGUFWriter(path, arch)
    writer.add_tensor(tensor, np.zeros((8, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(CheckpointError, match=problem):
        load_model_config(path)


def test_a_file_that_is_not_gguf_is_refused(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"not a gguf file at all")
    with pytest.raises(CheckpointError, match="cannot read GGUF file"):
        load_model_config(path)


def test_unpermute_inverts_llama_cpp_permutation():
    weight = np.arange(8 * 16 * 3, dtype=np.float32).reshape(8 * 16, 3)
    for heads in (8, 2, 1):
        assert np.array_equal(unpermute_rotary_rows(_permute(weight, heads), heads), weight)
        assert not np.array_equal(_permute(weight, heads), weight)
