"""The benchmarks' plumbing at tiny sizes: structure and finite ratios. Speed targets are checked by the
benchmarks' printed ratios (`python -m benchmarks methods|sparsemax`), never by timed tests."""
import json
import math

import pytest
import torch
from torch import nn

from benchmarks import suite as bench
from course_lib.notebook import timing
from benchmarks.head_speed import format_head_speed, span_speed, tagging_speed
from benchmarks.__main__ import main as bench_main
from course_lib.training.config import PretrainConfig

TINY_PRETRAIN = PretrainConfig(method="ag", num_hidden_layers=1, hidden_size=32, num_attention_heads=8,
                               intermediate_size=64, max_len=16, batch_size=4)


def positive(x) -> bool:
    return isinstance(x, float | int) and math.isfinite(x) and x > 0


def test_saved_activation_bytes_counts_each_storage_once_and_skips_weights():
    x = torch.randn(1000, requires_grad=True)
    assert bench.saved_activation_bytes(lambda: (x * x).sum(), nn.Module()) == 4000  # x saved twice, one storage
    linear, inputs = nn.Linear(10, 10), torch.randn(4, 10)
    assert bench.saved_activation_bytes(lambda: linear(inputs).sum(), linear) == 4 * 10 * 4  # the input, not W


def test_ratio_summary_pairs_rounds():
    """Ratios are taken round by round (pairs share a round's drift), then summarised; never medians' ratio."""
    numerators, denominators = [10.0, 1.0, 30.0, 2.0, 50.0], [10.0, 1.0, 10.0, 1.0, 10.0]  # ratios 1 1 3 2 5
    assert timing.ratio_summary(numerators, denominators) == {"median": 2.0, "iqr": [1.0, 3.0]}  # medians' ratio: 1
    assert timing.ratio_summary([1.0, 2.0, 3.0, 4.0], [1.0] * 4) == {"median": 2.5, "iqr": [1.75, 3.25]}
    assert timing.ratio_summary([3.0], [2.0]) == {"median": 1.5, "iqr": [1.5, 1.5]}
    assert timing.ratio_summary([1.0, 2.0], [3.0, 3.0]) == {"median": 0.5, "iqr": [0.417, 0.583]}  # 3 decimals


def table_row(table: str, first_cell: str) -> str:
    return next(line for line in table.splitlines() if line.startswith(f"| {first_cell} |"))


def test_methods_benchmark_structure(tiny_model_dir, monkeypatch, no_shipped_data):
    """Targets no step can miss or meet: whatever this machine measures, the verdicts are known."""
    monkeypatch.delenv("GLUE_DIR", raising=False)  # the generated corpus: the same text on every machine
    targets = {"ssaf": 1e6, "asa": 1e-6, "ag": 1e6}  # "at most this many baseline steps"
    monkeypatch.setattr(bench, "STEP_TARGETS", targets)
    monkeypatch.setattr(bench, "SSA_LABEL_TARGET", 1e-9)  # "at most this share of the epoch's training"
    result = bench.methods(str(tiny_model_dir), batch_size=4, seq_len=16, repeats=2, warmup=0, epoch_examples=16,
                           epoch_repeats=1, pretrain_config=TINY_PRETRAIN)
    rows = {r["method"]: r for r in result["methods"]}
    assert list(rows) == [*bench.FINETUNE_METHODS, "mlm", "ag"]
    for name, row in rows.items():
        assert row["baseline"] == ("mlm" if name in ("mlm", "ag") else "vanilla")
        assert positive(row["step_ms"]) and positive(row["ratio"]), row
        assert all(positive(q) for q in row["ratio_iqr"]) and row["ratio_iqr"][0] <= row["ratio_iqr"][1]
        assert positive(row["saved_activations_mb"]) or row["saved_activations_mb"] == 0.0
        assert row["target"] == targets.get(name) and (row["target"] is None) == (row["meets_target"] is None)
    assert rows["vanilla"]["ratio"] == 1.0 and rows["mlm"]["ratio"] == 1.0
    assert rows["ssaf"]["meets_target"] is True and rows["ag"]["meets_target"] is True
    assert rows["asa"]["meets_target"] is False
    assert [(s["probe"], s["epoch"], s["aug_ratio"]) for s in result["ssa_labels"]] == \
        [("fp32", 2, 0.2), ("fp32", 5, 0.8), ("bf16", 2, 0.2), ("bf16", 5, 0.8)]
    for ssa in result["ssa_labels"]:
        assert ssa["examples"] == 16 and ssa["probes"] > 0 and ssa["forward_passes"] > ssa["probes"]
        agreement = ssa["bf16_agrees_with_fp32"]
        assert agreement is None if ssa["probe"] == "fp32" else 0 <= agreement <= 1
        assert positive(ssa["share"]) and positive(ssa["label_s"]) and positive(ssa["epoch_train_s"])
        assert ssa["target"] == 1e-9 and ssa["meets_target"] is False
    table = bench.format_methods(result)
    assert all(f"| {name} |" in table for name in rows) and "ssa-hybrid labels" in table
    assert table_row(table, "ssaf").endswith(f"| <= {1e6}x | yes | {rows['ssaf']['saved_activations_mb']} |")
    assert table_row(table, "asa").endswith(f"| <= {1e-6}x | NO | {rows['asa']['saved_activations_mb']} |")
    no_target = table_row(table, "bernoulli-mask")
    assert no_target.endswith(f"|  |  | {rows['bernoulli-mask']['saved_activations_mb']} |")  # no target, no verdict
    assert all(line.endswith("| <= 0% | NO | - |") for line in table.splitlines() if "ssa-hybrid labels" in line)


def test_sparsemax_benchmark_structure(monkeypatch):
    """Ours must be at least SPARSEMAX_TARGET times faster than entmax: 1e-6 is always met, 1e6 never."""
    monkeypatch.setattr(bench, "SPARSEMAX_TARGET", 1e-6)
    result = bench.sparsemax_speed((2, 2, 16, 16), repeats=2, warmup=0)
    assert [c["lambda"] for c in result["cases"]] == [0.0, -4.0]
    for case in result["cases"]:
        assert set(case["median_ms"]) == {"ours", "entmax", "full_sort", "softmax"}
        assert all(positive(r["median"]) for r in case["ours_faster_than"].values())
        assert case["max_abs_diff_vs_entmax"] < 1e-5 and case["max_abs_grad_diff_vs_entmax"] < 1e-5
    assert result["cases"][0]["target"] == 1e-6 and result["cases"][0]["meets_target"] is True
    assert result["cases"][1]["target"] is None and result["cases"][1]["meets_target"] is None  # lambda -4
    masked = {r["mask_value"]: r for r in result["fully_masked_row"]}
    assert all(r["ours_output"] == r["ours_grad"] == "finite" for r in masked.values())
    assert masked["-inf"]["entmax_output"] != "finite"  # what entmax 1.3 does with it (it raises)
    table = bench.format_sparsemax(result)
    assert "fully masked row" in table and f"| >= {1e-6}x | yes |" in table_row(table, "0.0")
    monkeypatch.setattr(bench, "SPARSEMAX_TARGET", 1e6)
    missed = bench.sparsemax_speed((2, 2, 16, 16), repeats=2, warmup=0, lambdas=(0.0,))
    assert missed["cases"][0]["meets_target"] is False
    assert f"| >= {1e6}x | NO |" in table_row(bench.format_sparsemax(missed), "0.0")


def test_cli_bench_methods_json(tiny_model_dir, monkeypatch, capsys, no_shipped_data):
    monkeypatch.delenv("GLUE_DIR", raising=False)
    assert bench_main(["methods", "--json", "--model", str(tiny_model_dir), "--batch-size", "4",
                     "--seq-lens", "16", "--repeats", "1", "--epoch-examples", "8"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["seq_len"] == 16 and len(result["methods"]) == len(bench.FINETUNE_METHODS) + 2
    assert all(positive(r["ratio"]) for r in result["methods"]) and all(positive(s["share"]) for s in result["ssa_labels"])


def test_speed_benchmark_compares_identical_outputs(tiny_model_dir):
    result = bench.speed(str(tiny_model_dir), batch_size=2, seq_lens=(16,), repeats=2, warmup=0)
    assert [(c["seq_len"], c["mode"]) for c in result["cases"]] == [(16, "train"), (16, "inference")]
    for case in result["cases"]:
        assert case["max_abs_diff_vs_ours"] < 1e-5  # HF sdpa, HF eager and our [CLS]-only pass: same pooler output
        assert set(case["speedup_vs"]) == {"ours_cls", "plain_cls", "hf_sdpa", "hf_eager"}
        assert all(positive(x) for x in (*case["speedup_vs"].values(), *case["cls_speedup_vs"].values(),
                                         *case["plain_cls_speedup_vs"].values()))
    assert "| 16 | train |" in bench.format_speed(result)


@pytest.mark.parametrize("measure", [span_speed, tagging_speed], ids=["span QA", "tagging"])
def test_head_speed_compares_identical_logits_with_hugging_faces_model(tiny_model_dir, measure):
    result = measure(str(tiny_model_dir), batch_size=2, seq_len=32, repeats=2, warmup=0)
    assert result["max_abs_diff_vs_ours"] < 1e-5  # fast, plain and HF's BertFor... model: the same logits
    assert [c["mode"] for c in result["cases"]] == ["train", "inference"]
    assert all(positive(c["hf_over_ours"]["median"]) and positive(c["hf_over_plain"]["median"])
               for c in result["cases"])
    assert "| train |" in format_head_speed(result) and "| inference |" in format_head_speed(result)
