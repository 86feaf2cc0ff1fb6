"""``chassis bench engine --workload static-batch --compare hf``: our engine and transformers'
``generate`` on the checkpoint's own weights (a GGUF file too), each batch size side by side."""

import json
import re

import pytest

from engine.bench import engine_bench
from engine.testing.tiny_gguf import write_gguf
from engine.testing.tiny_model import make_tiny_model


@pytest.fixture(scope="module")
def plain_rope_llama(tmp_path_factory):
    """A tiny Llama with plain RoPE: llama.cpp carries Llama 3 RoPE scaling as a frequency tensor,
    which neither GGUF reader (ours, transformers') takes."""
    model_dir = make_tiny_model(tmp_path_factory.mktemp("bench") / "llama", arch="llama", seed=5)
    config = json.loads((model_dir / "config.json").read_text())
    config["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0}
    (model_dir / "config.json").write_text(json.dumps(config))
    return model_dir


@pytest.mark.parametrize("as_gguf", [False, True])
def test_static_batch_runs_both_engines_and_prints_their_ratios(plain_rope_llama, tmp_path, capsys, as_gguf):
    model = write_gguf(plain_rope_llama, tmp_path / "tiny.gguf") if as_gguf else plain_rope_llama
    out = tmp_path / "bench.json"
    argv = ["--model", str(model), "--device", "cpu", "--dtype", "float32", "--workload", "static-batch"]
    argv += ["--compare", "hf", "--static-batch-sizes", "1,3", "--static-prompt-len", "5"]
    argv += ["--static-output-len", "4", "--json", str(out)]
    assert engine_bench.main(argv) == 0

    report = json.loads(out.read_text())
    figures = report["figures"]
    for size in (1, 3):
        ours = figures[f"engine_static_batch_bs{size}_output_tokens_per_s"]
        theirs = figures[f"hf_static_bs{size}_output_tokens_per_s"]
        assert ours > 0 and theirs > 0
        assert figures[f"ratio_static_bs{size}_vs_hf"] == pytest.approx(ours / theirs)
        assert figures[f"ratio_static_bs{size}_vs_hf_bs1"] == pytest.approx(
            ours / figures["hf_static_bs1_output_tokens_per_s"]
        )
    assert "logical cores" in report["hardware"]
    assert "ratio_static_bs3_vs_hf_bs1" in capsys.readouterr().out


def test_batch_sizes_must_be_positive_integers(capsys):
    with pytest.raises(SystemExit) as exit_info:
        engine_bench.main(["--random-arch", "llama-3.1-8b", "--static-batch-sizes", "1,0"])
    assert exit_info.value.code == 2
    assert "batch sizes must be >= 1" in capsys.readouterr().err


def test_rounds_alternate_the_two_engines_and_report_medians(plain_rope_llama, tmp_path, capsys):
    out = tmp_path / "bench.json"
    argv = ["--model", str(plain_rope_llama), "--device", "cpu", "--dtype", "float32", "--workload"]
    argv += ["static-batch", "--compare", "hf", "--static-batch-sizes", "1,2", "--static-prompt-len", "5"]
    argv += ["--static-output-len", "4", "--rounds", "3", "--json", str(out)]
    assert engine_bench.main(argv) == 0

    printed = capsys.readouterr().out
    order = [line.split(":")[0] for line in printed.splitlines() if ", round " in line]
    assert order == [f"[bench] batch {s}, round {r}" for s in (1, 2) for r in (1, 2, 3)]
    figures = json.loads(out.read_text())["figures"]
    for size in (1, 2):
        rounds = [line for line in printed.splitlines() if f"batch {size}, round " in line]
        ours = sorted(float(re.search(r"engine ([\d,.]+),", line)[1].replace(",", "")) for line in rounds)
        assert figures[f"engine_static_batch_bs{size}_output_tokens_per_s"] == pytest.approx(
            ours[1], rel=1e-2
        )
        assert figures[f"ratio_static_bs{size}_vs_hf_round_median"] > 0
    assert "ratio_static_bs2_vs_hf_bs1_round_median" in figures


@pytest.mark.parametrize(
    "extra",
    [["--rounds", "0"], ["--rounds", "2"], ["--rounds", "2", "--compare", "hf", "--workload", "prefill"]],
)
def test_rounds_need_a_static_batch_against_transformers(extra, capsys):
    argv = ["--random-arch", "tiny-llama", "--device", "cpu", "--workload", "static-batch", *extra]
    assert engine_bench.main(argv) == 2
    assert "--rounds" in capsys.readouterr().out
