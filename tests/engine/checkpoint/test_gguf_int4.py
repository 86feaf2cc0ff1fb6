"""GGUF 4-bit tensors kept 4-bit: the codes, scales and offsets read from a file dequantize to the
bits gguf's own dequantizer gives, for Q4_0 and Q4_1, and slicing keeps them."""

import numpy as np
import pytest
import torch
from gguf.constants import GGMLQuantizationType
from gguf.quants import dequantize, quantize

from engine.checkpoint.gguf_int4 import GroupInt4, unpack_int4
from engine.checkpoint.gguf_weights import iter_gguf_weights
from engine.testing.smollm2 import smollm2_path


@pytest.mark.parametrize("type_name", ["Q4_0", "Q4_1"])
def test_unpacked_groups_dequantize_to_gguf_bits(type_name):
    qtype = GGMLQuantizationType[type_name]
    weight = np.random.default_rng(0).standard_normal((48, 96)).astype(np.float32)
    raw = quantize(weight, qtype)
    unpacked = unpack_int4(raw, type_name, 48, 96)
    assert unpacked.codes.dtype == torch.uint8 and int(unpacked.codes.max()) <= 15
    expected = torch.from_numpy(dequantize(raw, qtype).astype(np.float32))
    assert torch.equal(unpacked.dequantize(), expected)


def test_smollm2_projections_come_4bit_with_the_dequantized_bits():
    dense = dict(iter_gguf_weights(smollm2_path()))
    kept = dict(iter_gguf_weights(smollm2_path(), keep_int4=True))
    assert kept.keys() == dense.keys()
    int4 = {name for name, t in kept.items() if isinstance(t, GroupInt4)}
    assert "model.layers.0.self_attn.q_proj.weight" in int4  # rotary rows permuted back, like the dense one
    assert "model.layers.29.mlp.down_proj.weight" in int4
    assert "model.embed_tokens.weight" not in int4  # Q8_0: dequantized
    assert not any("norm" in name for name in int4)
    for name in ("model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
                 "model.layers.3.mlp.gate_proj.weight", "model.layers.3.self_attn.o_proj.weight"):
        assert torch.equal(kept[name].dequantize(), dense[name]), name


def test_narrow_keeps_whole_groups_and_dequantizes_split_ones():
    raw = quantize(np.random.default_rng(1).standard_normal((32, 128)).astype(np.float32), GGMLQuantizationType.Q4_1)
    weight = unpack_int4(raw, "Q4_1", 32, 128)
    full = weight.dequantize()
    rows = weight.narrow(0, 8, 16)
    assert isinstance(rows, GroupInt4) and torch.equal(rows.dequantize(), full[8:24])
    cols = weight.narrow(1, 32, 64)
    assert isinstance(cols, GroupInt4) and torch.equal(cols.dequantize(), full[:, 32:96])
    split = weight.narrow(1, 16, 64)
    assert not isinstance(split, GroupInt4) and torch.equal(split, full[:, 16:80])
