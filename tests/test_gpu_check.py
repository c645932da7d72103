"""The GPU check (ci/gpu_check.sh) runs end to end on a CPU with a tiny model, so the first session with a GPU
finds it working; its parity section must catch a real mismatch with Hugging Face."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from course_lib.lab.bench import gpu_check
from course_lib.notebook_params import check_parameters, notebook_names

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_gpu_check_runs_end_to_end_on_cpu(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable}
    env.pop("GLUE_DIR", None)  # the check makes its own data
    done = subprocess.run(["bash", str(ROOT / "ci" / "gpu_check.sh"), "--device", "cpu", "--size", "tiny",
                           "--work-dir", str(tmp_path)], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((tmp_path / "report.json").read_text())
    assert results["parity"]["passed"] and results["parity"]["fp32_hidden_max_abs_diff"] < 1e-4
    assert {case["seq_len"] for case in results["throughput"]["cases"]} == {64}
    assert all(run["finite"] for run in results["methods"]["runs"].values())
    assert set(results["methods"]["runs"]) >= {"vanilla", "ssaf", "asa", "ssa-co", "pretrain ag"}
    assert set(results["notebooks"]["runs"]) == set(notebook_names())
    assert all(run["passed"] for run in results["notebooks"]["runs"].values()), results["notebooks"]
    assert "skipped" in results["multi_gpu"]
    loop = results["loop"]
    assert loop["data"] == "shipped SST-2" and [case["compile"] for case in loop["cases"]] == ["off"]
    assert all(case["loop_ms"] > 0 and case["step_alone_ms"] > 0 for case in loop["cases"])
    assert results["methods"]["runs"]["pretrain mlm"]["finite"]  # its vocabulary from the random model's folder
    report = (tmp_path / "report.md").read_text()
    for section, what in gpu_check.SECTIONS.items():
        assert f"## {section}:" in report and what in report  # says what it measures, even where it skipped


def test_every_shrunk_paper_preset_is_a_valid_parameter_set(tmp_path):
    for name in notebook_names():
        params = gpu_check.shrink_paper_preset(name, tmp_path / "model", tmp_path, "tiny")
        check_parameters(name, params)  # raises on an unknown key or a wrong type
        assert params["preset"] == "paper"
        assert len(params.get("seeds", [0])) == 1


def test_parity_catches_a_perturbed_weight(tmp_path, monkeypatch):
    model_dir = gpu_check.make_random_model(tmp_path / "tiny", "tiny")
    assert gpu_check.parity(model_dir, torch.device("cpu"), batch=2, seq=16)["passed"]
    from course_lib.model import weights

    real = weights.load_pretrained

    def perturbed(*args, **kwargs):
        model, tokenizer = real(*args, **kwargs)
        with torch.no_grad():
            model.layers[0].ffn.up.weight[0, 0] += 0.05
        return model, tokenizer

    monkeypatch.setattr(weights, "load_pretrained", perturbed)
    result = gpu_check.parity(model_dir, torch.device("cpu"), batch=2, seq=16)
    assert not result["passed"] and result["fp32_hidden_max_abs_diff"] > 1e-4


def test_generated_glue_reads_back_through_the_glue_reader(tmp_path):
    from course_lib.tasks import glue

    folder = gpu_check.write_generated_glue(tmp_path, train_rows=10, dev_rows=5)
    for task in glue.GLUE_TASKS.values():
        for split in task.splits:
            examples = glue.load_split(task, split, folder)
            assert len(examples) == (10 if split == "train" else 5)
            assert all(len(ex.texts) == len(task.text_columns) for ex in examples)
