"""The benchmarks' plumbing at tiny sizes: structure and finite ratios. Speed targets are checked by the
benchmarks' printed ratios (`python -m course_lib bench methods|sparsemax`), never by timed tests."""
import json
import math

import torch
from torch import nn

from course_lib import bench, cli
from course_lib.config import PretrainConfig

TINY_PRETRAIN = PretrainConfig(num_layers=1, hidden_size=32, num_heads=8, intermediate_size=64, max_len=16,
                               batch_size=4)


def positive(x) -> bool:
    return isinstance(x, float | int) and math.isfinite(x) and x > 0


def test_saved_activation_bytes_counts_each_storage_once_and_skips_weights():
    x = torch.randn(1000, requires_grad=True)
    assert bench.saved_activation_bytes(lambda: (x * x).sum(), nn.Module()) == 4000  # x saved twice, one storage
    linear, inputs = nn.Linear(10, 10), torch.randn(4, 10)
    assert bench.saved_activation_bytes(lambda: linear(inputs).sum(), linear) == 4 * 10 * 4  # the input, not W


def test_ratio_summary_pairs_rounds():
    summary = bench.ratio_summary([2.0, 4.0, 6.0], [1.0, 2.0, 2.0])
    assert summary["median"] == 2.0 and summary["iqr"][0] <= 2.0 <= summary["iqr"][1]
    assert bench.ratio_summary([3.0], [2.0]) == {"median": 1.5, "iqr": [1.5, 1.5]}


def test_methods_benchmark_structure(tiny_model_dir, monkeypatch):
    monkeypatch.delenv("GLUE_DIR", raising=False)  # the generated corpus: the same text on every machine
    result = bench.methods(str(tiny_model_dir), batch_size=4, seq_len=16, repeats=2, warmup=0, epoch_examples=16,
                           epoch_repeats=1, pretrain_config=TINY_PRETRAIN)
    rows = {r["method"]: r for r in result["methods"]}
    assert list(rows) == [*bench.FINETUNE_METHODS, "mlm", "ag"]
    for name, row in rows.items():
        assert row["baseline"] == ("mlm" if name in ("mlm", "ag") else "vanilla")
        assert positive(row["step_ms"]) and positive(row["ratio"]), row
        assert all(positive(q) for q in row["ratio_iqr"]) and row["ratio_iqr"][0] <= row["ratio_iqr"][1]
        assert positive(row["saved_activations_mb"]) or row["saved_activations_mb"] == 0.0
        assert (row["target"] is None) == (row["meets_target"] is None)
    assert rows["vanilla"]["ratio"] == 1.0 and rows["mlm"]["ratio"] == 1.0
    assert rows["ssaf"]["target"] == 1.5 and rows["asa"]["target"] == 2.2 and rows["ag"]["target"] == 1.15
    assert [(s["probe"], s["epoch"], s["aug_ratio"]) for s in result["ssa_labels"]] == \
        [("fp32", 2, 0.2), ("fp32", 5, 0.8), ("bf16", 2, 0.2), ("bf16", 5, 0.8)]
    for ssa in result["ssa_labels"]:
        assert ssa["examples"] == 16 and ssa["probes"] > 0 and ssa["forward_passes"] > ssa["probes"]
        agreement = ssa["bf16_agrees_with_fp32"]
        assert agreement is None if ssa["probe"] == "fp32" else 0 <= agreement <= 1
        assert positive(ssa["share"]) and positive(ssa["label_s"]) and positive(ssa["epoch_train_s"])
    table = bench.format_methods(result)
    assert all(f"| {name} |" in table for name in rows) and "ssa-hybrid labels" in table


def test_sparsemax_benchmark_structure():
    result = bench.sparsemax_speed((2, 2, 16, 16), repeats=2, warmup=0)
    assert [c["lambda"] for c in result["cases"]] == [0.0, -4.0]
    for case in result["cases"]:
        assert set(case["median_ms"]) == {"ours", "entmax", "full_sort", "softmax"}
        assert all(positive(r["median"]) for r in case["ours_faster_than"].values())
        assert case["max_abs_diff_vs_entmax"] < 1e-5 and case["max_abs_grad_diff_vs_entmax"] < 1e-5
    assert result["cases"][0]["target"] == 2.0 and result["cases"][1]["meets_target"] is None
    masked = {r["mask_value"]: r for r in result["fully_masked_row"]}
    assert all(r["ours_output"] == r["ours_grad"] == "finite" for r in masked.values())
    assert masked["-inf"]["entmax_output"] != "finite"  # what entmax 1.3 does with it (it raises)
    assert "fully masked row" in bench.format_sparsemax(result)


def test_cli_bench_methods_json(tiny_model_dir, monkeypatch, capsys):
    monkeypatch.delenv("GLUE_DIR", raising=False)
    assert cli.main(["bench", "methods", "--json", "--model", str(tiny_model_dir), "--batch-size", "4",
                     "--seq-lens", "16", "--repeats", "1", "--epoch-examples", "8"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["seq_len"] == 16 and len(result["methods"]) == len(bench.FINETUNE_METHODS) + 2
    assert all(positive(r["ratio"]) for r in result["methods"]) and all(positive(s["share"]) for s in result["ssa_labels"])


def test_speed_benchmark_compares_identical_outputs(tiny_model_dir):
    result = bench.speed(str(tiny_model_dir), batch_size=2, seq_lens=(16,), repeats=2, warmup=0)
    assert [(c["seq_len"], c["mode"]) for c in result["cases"]] == [(16, "train"), (16, "inference")]
    for case in result["cases"]:
        assert case["max_abs_diff_vs_ours"] < 1e-5  # HF sdpa, HF eager and our [CLS]-only pass: same pooler output
        assert set(case["speedup_vs"]) == {"ours_cls", "hf_sdpa", "hf_eager"}
        assert all(positive(x) for x in (*case["speedup_vs"].values(), *case["cls_speedup_vs"].values()))
    assert "| 16 | train |" in bench.format_speed(result)
