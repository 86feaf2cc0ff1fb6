"""The ``serve`` workload: a real ``chassis serve`` process under concurrent streaming clients.

Each client sends its share of the requests back to back over ``/v1/completions`` (token-id
prompts, ``ignore_eos``, ``min_tokens`` = ``max_tokens`` so every request yields exactly its output
length) and times the SSE chunks with ``measurement.StreamTimer``: TTFT is request start to first
text chunk, inter-token latency (ITL) the gap between consecutive text chunks (one chunk per decode
step that produced text, as in vLLM's ``benchmark_serving``).
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from engine.bench.workloads import WorkloadResult, random_prompts
from engine.executor.supervision import terminate
from measurement import StreamRecord, StreamTimer, Summary, atime_stream

MODEL_NAME = "bench"
REPO = Path(__file__).resolve().parents[2]


@dataclass
class ServeOptions:
    clients: int = 64
    requests: int = 256
    prompt_len: tuple[int, int] = (128, 1024)  # the offline length mix
    output_len: tuple[int, int] = (128, 512)
    device: str = "cuda"
    dtype: str = "bfloat16"
    load_format: str = "auto"
    seed: int = 0
    startup_timeout_s: float = 900.0
    extra_args: list[str] = field(default_factory=list)

    def validate(self) -> None:
        if self.clients < 1 or self.requests < 1:
            raise ValueError("serve: --serve-clients and --serve-requests must be at least 1")
        for name, (low, high) in (("prompt", self.prompt_len), ("output", self.output_len)):
            if not 1 <= low <= high:
                raise ValueError(f"serve: {name} length range [{low}, {high}] is empty or below 1")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerProcess:
    """``chassis serve`` in a subprocess on a free loopback port; always ended on exit."""

    def __init__(self, model_dir: Path, options: ServeOptions, log_path: Path):
        self.port = _free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        max_model_len = options.prompt_len[1] + options.output_len[1] + 16
        self.cmd = [
            sys.executable, "-m", "chassis", "serve", str(model_dir),
            "--host", "127.0.0.1", "--port", str(self.port),
            "--device", options.device, "--dtype", options.dtype, "--load-format", options.load_format,
            "--served-model-name", MODEL_NAME, "--max-model-len", str(max_model_len),
            "--max-num-seqs", str(max(options.clients, 1)), "--log-level", "warning",
            *options.extra_args,
        ]  # fmt: skip
        self.timeout_s = options.startup_timeout_s
        self.process: subprocess.Popen | None = None

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def __enter__(self) -> ServerProcess:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(self.cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + self.timeout_s
        try:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(
                        f"chassis serve exited with {self.process.returncode}:\n{self.log_tail()}"
                    )
                try:
                    if httpx.get(f"{self.base_url}/health", timeout=2).status_code == 200:
                        return self
                except httpx.TransportError:
                    pass
                time.sleep(0.3)
            raise RuntimeError(f"chassis serve not ready in {self.timeout_s:.0f} s:\n{self.log_tail()}")
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self, timeout: float = 60) -> None:
        if self.process is not None:
            terminate(self.process, timeout)


async def _stream_one(client: httpx.AsyncClient, prompt: list[int], max_tokens: int) -> StreamRecord:
    body = {
        "model": MODEL_NAME,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "min_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    timer = StreamTimer()
    async with client.stream("POST", "/v1/completions", json=body) as response:
        if response.status_code != 200:
            raise RuntimeError(f"serve: HTTP {response.status_code}: {(await response.aread())[:500]!r}")
        record = await atime_stream(response.aiter_lines(), timer)
    if record.error is not None:
        raise RuntimeError(f"serve: error in stream: {record.error}")
    if record.ttft_s is None or record.usage is None:
        raise RuntimeError("serve: a stream ended without text or usage")
    return record


def _running_requests(metrics_text: str) -> float | None:
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(metrics_text):
        if family.name == "vllm:num_requests_running":
            return sum(sample.value for sample in family.samples)
    return None


async def _sample_batch_sizes(client: httpx.AsyncClient, samples: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            value = _running_requests((await client.get("/metrics")).text)
            if value is not None and value > 0:  # idle gaps between requests are not decode batches
                samples.append(value)
        except httpx.HTTPError:
            pass
        try:
            await asyncio.wait_for(stop.wait(), timeout=0.02)
        except TimeoutError:
            pass


async def _drive(
    base_url: str,
    work: list[tuple[list[int], int]],
    warmup_prompt: list[int],
    clients: int,
    say: Callable[[str], None],
) -> tuple[float, list[StreamRecord], list[float]]:
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    timeout = httpx.Timeout(600.0, connect=30.0)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=timeout) as client:
        # Warm-up: compile kernels at a real prompt length before the clock starts.
        await _stream_one(client, warmup_prompt, 8)
        timings: list[StreamRecord] = []
        samples: list[float] = []
        stop = asyncio.Event()

        async def run_client(index: int) -> None:
            for prompt, max_tokens in work[index::clients]:
                timings.append(await _stream_one(client, prompt, max_tokens))

        async def report_progress() -> None:
            while not stop.is_set():
                try:
                    await asyncio.wait_for(stop.wait(), timeout=5.0)
                except TimeoutError:
                    say(f"serve: {len(timings)}/{len(work)} requests done")

        sampler = asyncio.create_task(_sample_batch_sizes(client, samples, stop))
        progress = asyncio.create_task(report_progress())
        started = time.perf_counter()
        try:
            await asyncio.gather(*(run_client(i) for i in range(clients)))
            seconds = time.perf_counter() - started
        finally:
            stop.set()
            await asyncio.gather(sampler, progress)
    return seconds, timings, samples


def serve_work(options: ServeOptions, vocab: int) -> list[tuple[list[int], int]]:
    """(prompt ids, output length) of every request, seeded: the same for the server and for the
    in-process reference run (engine/bench/step_time.py)."""
    rng = random.Random(options.seed)
    prompts = random_prompts(options.requests, *options.prompt_len, vocab, options.seed)
    return [(prompt, rng.randint(*options.output_len)) for prompt in prompts]


def serve(
    model_dir: Path, vocab: int, options: ServeOptions, say: Callable[[str], None] = print
) -> WorkloadResult:
    options.validate()
    work = serve_work(options, vocab)
    (warmup_prompt,) = random_prompts(1, *options.prompt_len, vocab, options.seed + 1)
    with tempfile.TemporaryDirectory() as tmp:
        server = ServerProcess(Path(model_dir), options, Path(tmp) / "serve.log")
        say(f"serve: starting chassis serve on port {server.port}")
        with server:
            say(f"serve: {options.requests} requests from {options.clients} streaming clients")
            seconds, timings, samples = asyncio.run(
                _drive(server.base_url, work, warmup_prompt, options.clients, say)
            )
    expected = [max_tokens for _, max_tokens in work]
    got = sorted(t.output_tokens for t in timings)
    if got != sorted(expected):
        raise RuntimeError(
            f"serve: output lengths differ from the requested ones ({sum(got)} vs {sum(expected)})"
        )
    ttft = Summary.of(t.ttft_s * 1e3 for t in timings)
    itl = Summary.of(gap * 1e3 for t in timings for gap in t.itl_s)
    out_tokens = sum(got)
    figures = {
        "ttft_p50_ms": ttft.p50,
        "ttft_p99_ms": ttft.p99,
        "itl_p50_ms": itl.p50,
        "itl_p99_ms": itl.p99,
        "output_tokens_per_s": out_tokens / seconds,
        "seconds": seconds,
        "requests": len(timings),
        "clients": options.clients,
        "output_tokens": out_tokens,
    }
    if samples:  # a run shorter than the sampling period may see none: no figure rather than a false 0
        figures["mean_running_requests"] = sum(samples) / len(samples)
    return WorkloadResult(
        "serve",
        figures,
        f"prompts uniform in {list(options.prompt_len)}, outputs uniform in {list(options.output_len)}, "
        "ignore_eos; ITL = gap between SSE text chunks; mean_running_requests = mean of "
        "vllm:num_requests_running sampled every 20 ms while non-zero (the server's decode batch size; "
        "absent when no sample saw a request running); "
        "compare itl_p50_ms with serve-reference step_p50_ms, the engine's own step under the same load",
    )
