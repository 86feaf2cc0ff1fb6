"""CUDA graphs for decode-only steps: one captured forward + LM head per padded batch size.

A decode step of an 8B model is ~350 small kernel launches; replaying a graph turns them into one
launch, so the step runs at the GPU's pace instead of Python's. Every input lives in a static
device buffer the graphs were captured on; a step copies its few integers in (two host-to-device
copies), replays the graph for the next captured size up, and reads the logits of its real rows.
Padded rows write no KV (slot -1) and attend over one key of block 0, so they cost almost nothing
and touch no request's cache.

Speculative verify steps run through the same graphs: a request feeding its last token and k draft
tokens becomes k + 1 one-token rows, row i at position start + i with seq_len start + i + 1 over the
request's block table. Every layer writes all rows' K/V (paged K/V, or the latent cache of latent
attention) before its attention reads the cache, so row i sees exactly keys 0..start + i: the causal
attention of the eager verify, with logits in its order (each request's rows consecutively).

A prompt's last chunk of at most ``TAIL_ROWS`` tokens (what a prefix-cache hit leaves to compute)
runs the same way, one row per token, also beside verify rows (a request admitted while others
speculate), and the runner keeps its last row's logits: the eager step
that would run instead is launched kernel by kernel from Python, which on a hit served from the KV
tiers is most of the TTFT left after the onload. Each row's attention reads the context once, so
longer chunks stay eager (one pass serves all their queries). Not in batch-invariant mode, where a
prompt's last token must take the same kernels with or without a cache hit.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from engine.layers.attention import AttentionMetadata
from engine.runner.host_copy import copy_to
from engine.scheduler.output import SchedulerOutput
from kernels.invariance import batch_invariant

TAIL_ROWS = 16  # the longest prompt chunk the graphs run (one row per token)
GRAPHED_PROPOSERS = ("ngram", "draft_model")  # speculative methods whose verify steps replay the graphs

# Rows of the packed int64 staging buffer (the last two: the window group's, engine/kv/layout.py).
_TOKENS, _POSITIONS, _SLOTS, _SEQ_LENS, _WINDOW_SLOTS, _WINDOW_SEQ_LENS = range(6)


def max_graph_rows(config) -> int:
    """Rows of the largest decode graph an engine of ``config`` (an ``EngineConfig``) captures: its
    ``max_cudagraph_capture_size``, by default ``max_num_seqs`` rows, times 1 + the longest draft when
    a proposer's verify steps replay these graphs (the MTP proposer reads hidden states, which they do
    not output); at most one step's token budget, at least ``TAIL_ROWS``."""
    rows = config.max_cudagraph_capture_size
    if rows is None:
        rows = config.max_num_seqs
        if config.speculative_method in GRAPHED_PROPOSERS:
            rows *= 1 + config.num_speculative_tokens
    return max(min(rows, config.max_num_batched_tokens), TAIL_ROWS)


def capture_sizes(max_batch: int) -> list[int]:
    """1, 2, 4, 8, then every multiple of 16 up to ``max_batch`` (and ``max_batch`` itself)."""
    sizes = [s for s in (1, 2, 4, 8) if s <= max_batch]
    sizes += list(range(16, max_batch + 1, 16))
    if sizes[-1] != max_batch:
        sizes.append(max_batch)
    return sizes


class DecodeGraphs:
    def __init__(
        self, model, max_batch: int, max_blocks_per_seq: int, block_size: int, device, windowed: bool = False
    ) -> None:
        """``windowed``: sliding-window layers read a window group's tables of their own."""
        self.model = model
        self.block_size = block_size
        self.device = device
        self.windowed = windowed
        self.sizes = capture_sizes(max_batch)
        self.max_batch = self.sizes[-1]
        self.packed = torch.zeros((6, self.max_batch), dtype=torch.int64, device=device)
        self.packed[[_SEQ_LENS, _WINDOW_SEQ_LENS]] = 1
        self.packed[[_SLOTS, _WINDOW_SLOTS]] = -1
        self.block_tables = torch.zeros(
            (self.max_batch, max_blocks_per_seq), dtype=torch.int32, device=device
        )
        self.window_block_tables = torch.zeros_like(self.block_tables) if windowed else None
        # Every graph reads its query offsets (0, 1, .., size) from this one buffer: a graph keeps no
        # tensor alive, so inputs made at capture would be freed and their memory reused under it.
        self.query_start_loc = torch.arange(self.max_batch + 1, dtype=torch.int32, device=device)
        self.replays: dict[int, Callable[[], None]] = {}  # size -> replay of that size's step
        self.steps_run = 0  # decode steps served by a replay (the benchmarks report it)
        self.verify_steps_run = 0  # of those, speculative verify steps (some request fed drafts)
        self.tail_steps_run = 0  # of those, steps where some request fed the last tokens of its prompt
        # Every size writes its logits into the first rows of this one fp32 buffer: a tensor per size
        # would hold sum(sizes) x vocab floats, ~38 GB for verify steps of 1,536 rows over a 128k vocabulary.
        vocab = model.lm_head.vocab_size
        self.logits = torch.empty((self.max_batch, vocab), dtype=torch.float32, device=device)
        self._host = np.zeros((6, self.max_batch), dtype=np.int64)
        self._table = _HostTable(self.max_batch, max_blocks_per_seq)  # steps of one row per request
        self._window_table = _HostTable(self.max_batch, max_blocks_per_seq) if windowed else None
        # Steps of several rows for some request: a row per request here, expanded into the rows' table.
        self._request_table = _HostTable(self.max_batch, max_blocks_per_seq)
        self._rows = np.zeros((self.max_batch, max_blocks_per_seq), dtype=np.int32)
        self._window_request_table = _HostTable(self.max_batch, max_blocks_per_seq) if windowed else None
        self._window_rows = np.zeros_like(self._rows) if windowed else None

    def _meta(self, size: int) -> AttentionMetadata:
        query_start_loc = self.query_start_loc[: size + 1]
        meta = AttentionMetadata(
            slot_mapping=self.packed[_SLOTS, :size],
            block_tables=self.block_tables[:size],
            seq_lens=self.packed[_SEQ_LENS, :size],
            query_start_loc=query_start_loc,
            decode_only=True,
        )
        if self.windowed:
            meta.window = AttentionMetadata(
                slot_mapping=self.packed[_WINDOW_SLOTS, :size],
                block_tables=self.window_block_tables[:size],
                seq_lens=self.packed[_WINDOW_SEQ_LENS, :size],
                query_start_loc=query_start_loc,
                decode_only=True,
            )
        return meta

    def _forward(self, size: int, meta: AttentionMetadata) -> None:
        tokens, positions = self.packed[_TOKENS, :size], self.packed[_POSITIONS, :size]
        self.model.decode_logits(tokens, positions, meta, out=self.logits[:size])

    @torch.inference_mode()
    def capture(self) -> None:
        """Capture every size, largest first so smaller graphs reuse its memory pool."""
        pool = torch.cuda.graph_pool_handle()
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for size in reversed(self.sizes):
                meta = self._meta(size)
                self._forward(size, meta)  # compile Triton kernels, settle cuBLAS workspaces
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool, stream=stream):
                    self._forward(size, meta)
                self.replays[size] = graph.replay
        torch.cuda.current_stream(self.device).wait_stream(stream)
        torch.cuda.synchronize(self.device)

    def use_eager(self) -> None:
        """Replays that rerun the forward eagerly on the static buffers: the same input path on
        devices without graphs, which is how the CPU tests check the padding and staging logic."""
        for size in self.sizes:
            meta = self._meta(size)

            def replay(size=size, meta=meta) -> None:
                with torch.inference_mode():
                    self._forward(size, meta)

            self.replays[size] = replay

    def can_run(self, out: SchedulerOutput) -> bool:
        """Every request samples and feeds one token, or one plus its drafts (a verify step), or
        the last ``TAIL_ROWS`` or fewer tokens of its prompt, and their rows fit the largest captured
        size. Other prompt chunks stay eager."""
        if not out.scheduled:
            return False
        rows, tails = 0, not batch_invariant()
        for s in out.scheduled:
            if not s.samples:
                return False
            is_tail = (
                tails and not s.num_draft_tokens and s.num_tokens <= TAIL_ROWS and not s.pending_token
            )  # feeds known tokens
            if s.num_tokens != 1 + s.num_draft_tokens and not is_tail:
                return False
            rows += s.num_tokens
        return rows <= self.max_batch

    @staticmethod
    def sample_rows(out: SchedulerOutput) -> list[int] | None:
        """The rows whose logits sample when a prompt tail fed several tokens (only its last one
        samples; a verify request's rows all do, its token's and its drafts'), else None (every row)."""
        if all(s.num_tokens == 1 + s.num_draft_tokens for s in out.scheduled):
            return None
        rows, keep = 0, []
        for s in out.scheduled:
            rows += s.num_tokens
            keep.extend(range(rows - 1 - s.num_draft_tokens, rows))
        return keep

    def run(
        self,
        out: SchedulerOutput,
        before_copies: Callable[[], None] | None = None,
        feed: Callable[[torch.Tensor, list[int]], None] | None = None,
    ) -> torch.Tensor:
        """Logits ``[rows, vocab]`` (fp32) of a step ``can_run`` accepts: one row per fed token, each
        request's rows consecutively (a verify step's logits in the eager path's order).

        ``feed(token_buffer, rows)`` writes the device-side ids of rows whose token is pending."""
        scheduled = out.scheduled
        verify = out.num_draft_tokens > 0
        host = self._host
        if any(s.num_tokens > 1 for s in scheduled):
            n = sum(s.num_tokens for s in scheduled)
            size = next(s for s in self.sizes if s >= n)
            table, width, window_table, window_width = self._stage_rows(scheduled, n, size)
        else:
            n = len(scheduled)
            size = next(s for s in self.sizes if s >= n)
            self._stage_one_row_each(scheduled, n)
            table, width = self._table.table, self._table.update([s.block_ids for s in scheduled], size)
            if self.windowed:
                window_table = self._window_table.table
                window_width = self._window_table.update([s.window_block_ids for s in scheduled], size)
        host[_TOKENS : _POSITIONS + 1, n:size] = 0
        host[[_SLOTS, _WINDOW_SLOTS], n:size] = -1
        host[[_SEQ_LENS, _WINDOW_SEQ_LENS], n:size] = 1
        if before_copies is not None:
            before_copies()
        copy_to(self.packed[:, :size], host[:, :size])
        copy_to(self.block_tables[:size, :width], table[:size, :width])
        if self.windowed:
            copy_to(self.window_block_tables[:size, :window_width], window_table[:size, :window_width])
        if feed is not None:
            pending = self._pending_rows(scheduled)
            if pending:
                feed(self.packed[_TOKENS], pending)
        self.replays[size]()
        self.steps_run += 1
        self.verify_steps_run += verify
        self.tail_steps_run += n > len(scheduled) + out.num_draft_tokens
        return self.logits[:n]

    def _stage_one_row_each(self, scheduled, n: int) -> None:
        """A step of one row per request: its token, position, slot and sequence length."""
        bs, host = self.block_size, self._host
        host[_TOKENS, :n] = [s.token_ids[0] for s in scheduled]
        host[_POSITIONS, :n] = [s.start for s in scheduled]
        host[_SLOTS, :n] = [
            -1 if s.start < s.reused_until else s.block_ids[s.start // bs - s.block_base] * bs + s.start % bs
            for s in scheduled
        ]
        host[_SEQ_LENS, :n] = [s.start + 1 - s.block_base * bs for s in scheduled]
        if self.windowed:
            host[_WINDOW_SLOTS, :n] = [
                s.window_block_ids[s.start // bs - s.window_base] * bs + s.start % bs for s in scheduled
            ]
            host[_WINDOW_SEQ_LENS, :n] = [s.start + 1 - s.window_base * bs for s in scheduled]

    def _stage_rows(self, scheduled, n: int, size: int):
        """A step of several rows for some request (a verify step, a prompt tail): each request's
        values staged once and repeated over its rows with numpy, as a 768-row verify step of 128
        requests would otherwise cost thousands of Python operations per row-sized list. Returns the
        host block tables to copy and their widths (each row its request's block ids)."""
        bs, host, count = self.block_size, self._host, len(scheduled)
        fed = np.fromiter((s.num_tokens for s in scheduled), np.int64, count)
        owner = np.repeat(np.arange(count), fed)
        first_row = np.cumsum(fed) - fed
        starts = np.fromiter((s.start for s in scheduled), np.int64, count)
        positions = starts[owner] + (np.arange(n) - first_row[owner])
        host[_TOKENS, :n] = [t for s in scheduled for t in s.token_ids]
        host[_POSITIONS, :n] = positions
        in_block = positions % bs

        def stage(requests: _HostTable, id_lists, bases, slots_row: int, lens_row: int, rows) -> int:
            width = requests.update(id_lists, count)
            base = bases[owner]
            blocks = requests.table[owner, np.clip(positions // bs - base, 0, width - 1)]
            host[slots_row, :n] = blocks.astype(np.int64) * bs + in_block
            host[lens_row, :n] = positions + 1 - base * bs
            rows[:n, :width] = requests.table[owner, :width]
            rows[n:size, 0] = 0  # padded rows read block 0 (always valid)
            return width

        bases = np.fromiter((s.block_base for s in scheduled), np.int64, count)
        width = stage(self._request_table, [s.block_ids for s in scheduled], bases, _SLOTS, _SEQ_LENS, self._rows)
        reused = np.fromiter((s.reused_until for s in scheduled), np.int64, count)
        host[_SLOTS, :n][positions < reused[owner]] = -1  # their KV is in the cache already
        if not self.windowed:
            return self._rows, width, None, None
        bases = np.fromiter((s.window_base for s in scheduled), np.int64, count)
        window_ids = [s.window_block_ids for s in scheduled]
        window_width = stage(
            self._window_request_table, window_ids, bases, _WINDOW_SLOTS, _WINDOW_SEQ_LENS, self._window_rows
        )
        return self._rows, width, self._window_rows, window_width

    @staticmethod
    def _pending_rows(scheduled) -> list[int]:
        """The row of each pending token: a request's first row (drafts follow a known token)."""
        pending, row = [], 0
        for s in scheduled:
            if s.pending_token:
                pending.append(row)
            row += s.num_tokens
        return pending


class _HostTable:
    """Host copy of a block table and, per row, (block-id list written, how many of its ids)."""

    def __init__(self, rows: int, width: int) -> None:
        self.table = np.zeros((rows, width), dtype=np.int32)
        self._rows: list[tuple[list[int] | None, int]] = [(None, 0)] * rows

    def update(self, id_lists: list[list[int]], size: int) -> int:
        """Refresh the table, writing only rows whose blocks changed; returns the width in use.

        ``id_lists``: each row's block ids (a verify step's request owns several consecutive rows,
        each with the same list). A request's list is the KV manager's live list (same object every
        step, grown in place; replaced when drafts are trimmed or blocks leave a window), so a row
        is rewritten only when it holds another request or got a new block."""
        table, rows = self.table, self._rows
        width = 1
        for i, ids in enumerate(id_lists):
            k = len(ids)
            owner, written = rows[i]
            if owner is not ids:
                table[i, :k] = ids
            elif written != k:
                table[i, written:k] = ids[written:]
            if owner is not ids or written != k:
                rows[i] = (ids, k)
            if k > width:
                width = k
        for i in range(len(id_lists), size):
            if rows[i][0] is not None:
                table[i, 0] = 0  # padded rows read block 0 (always valid)
                rows[i] = (None, 0)
        return width
