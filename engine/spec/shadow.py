"""The bookkeeping both model-based proposers share: each keeps a shadow copy of a request on its own
paged KV cache that holds only verified tokens, and schedules it like the target schedules requests."""

from __future__ import annotations

from engine.kv.kv_manager import KVCacheManager
from engine.sampling.params import SamplingParams
from engine.scheduler.output import ScheduledRequest
from engine.scheduler.request import Request

GREEDY = SamplingParams(max_tokens=None, temperature=0.0)


def caught_up_shadow(
    shadows: dict[str, Request], request: Request, max_model_len: int, skip: int = 0
) -> Request:
    """The shadow of ``request`` (made on first use) holding its verified tokens from index ``skip``
    on (the MTP layer's sequence starts at the second token)."""
    shadow = shadows.get(request.request_id)
    history = request.all_token_ids
    if shadow is None:
        shadow = Request(
            request.request_id, list(history[skip:]), max_tokens=max_model_len, sampling_params=GREEDY
        )
        shadows[request.request_id] = shadow
    for token in history[shadow.num_tokens + skip :]:
        shadow.append_output_token(token)
    return shadow


def scheduled_shadow(
    kv: KVCacheManager, shadow: Request, start: int, token_ids: list[int]
) -> ScheduledRequest:
    return ScheduledRequest(
        request=shadow,
        start=start,
        num_tokens=len(token_ids),
        block_ids=kv.block_ids(shadow.request_id),
        token_ids=list(token_ids),
        samples=True,
    )
