"""Benchmarks only: a verification step's accept/reject decision replaced by a coin of known bias.

Real verification accepts a draft token when the target model picks it too, which makes the
acceptance rate depend on the draft's content and, in bf16, on near-ties that the verification pass
(eager, several tokens per request) and plain decoding (CUDA graphs) break differently. The
speculative grid bench (``engine/bench/speculative_grid.py``) wants the rate fixed instead: with
this object installed as the runner's ``acceptance_override``, each draft position is accepted with
probability ``p``, independently, and the verified prefix ends at the first rejection, where the
target's own token is emitted as usual. The step's GPU work is the real one (the same verify forward
over every draft token, the same sampling); only the decision differs, so outputs are no longer the
target's greedy ones.

Never set by ``EngineConfig``, the CLI or the API: the bench installs it on the runner itself.
"""

from __future__ import annotations

import hashlib
import random

from engine.sampling.sampler import num_outputs_before


class ForcedAcceptance:
    def __init__(self, acceptance: float, seed: int = 0) -> None:
        if not 0.0 <= acceptance <= 1.0:
            raise ValueError(f"acceptance must be in [0, 1], got {acceptance}")
        self.acceptance = acceptance
        self.seed = seed
        self._draws: dict[tuple[int, ...], tuple[random.Random, list[float]]] = {}

    def accepted_prefix(self, request, draft_len: int) -> int:
        """How many leading draft tokens of ``request`` this step accepts (0 to ``draft_len``)."""
        start = num_outputs_before(request)
        for i in range(draft_len):
            if self.draw(request.prompt_token_ids, start + i) >= self.acceptance:
                return i
        return draft_len

    def draw(self, prompt_token_ids: list[int], position: int) -> float:
        """A draw in [0, 1) fixed by (seed, prompt, output position), whatever the scheduling and
        batch: every mode of the bench sees the same rejections."""
        key = tuple(prompt_token_ids)
        entry = self._draws.get(key)
        if entry is None:
            digest = hashlib.blake2b(f"{self.seed}:{key}".encode(), digest_size=8).digest()
            entry = self._draws[key] = (random.Random(int.from_bytes(digest, "little")), [])
        rng, draws = entry
        while len(draws) <= position:
            draws.append(rng.random())
        return draws[position]
