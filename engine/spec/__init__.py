"""Speculative decoding: proposers, the confidence scheduler and the engine's speculator."""
