from engine.tokenizer.detokenizer import IncrementalDetokenizer
from engine.tokenizer.tokenizer import Tokenizer

__all__ = ["IncrementalDetokenizer", "Tokenizer"]
