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
        # request id -> (its prompt list, its draws): keyed by id and checked by identity so a step
        # costs no hashing of prompts (thousands of draft positions per step at large batches)
        self._requests: dict[str, tuple[list[int], list[float], random.Random]] = {}

    def accepted_prefix(self, request, draft_len: int) -> int:
        """How many leading draft tokens of ``request`` this step accepts (0 to ``draft_len``)."""
        if not draft_len:
            return 0
        entry = self._requests.get(request.request_id)
        if entry is None or entry[0] is not request.prompt_token_ids:
            rng = random.Random(prompt_seed(self.seed, request.prompt_token_ids))
            entry = self._requests[request.request_id] = (request.prompt_token_ids, [], rng)
        _, draws, rng = entry
        start = num_outputs_before(request)
        while len(draws) < start + draft_len:
            draws.append(rng.random())
        for i in range(draft_len):
            if draws[start + i] >= self.acceptance:
                return i
        return draft_len


def prompt_seed(seed: int, prompt_token_ids: list[int]) -> int:
    """The draws are fixed by (seed, prompt, output position), whatever the scheduling and batch:
    every mode of the bench sees the same rejections."""
    digest = hashlib.blake2b(f"{seed}:{tuple(prompt_token_ids)}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")
