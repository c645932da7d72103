"""The GPU check (ci/gpu_check.sh) runs end to end on a CPU with a tiny model, so the first session with a GPU
finds it working; its parity section must catch a real mismatch with Hugging Face."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks import gpu_check
from course_lib.notebook.params import check_parameters, notebook_names

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_gpu_check_runs_end_to_end_on_cpu(tmp_path):
    """As on a GPU image, which lacks the default model's package: a module of that name with no folder
    hides it, so every notebook must take its tokenizer from the preset's model, not the package."""
    from course_lib.model.model_folder import DEFAULT_MODEL_PACKAGE

    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / f"{DEFAULT_MODEL_PACKAGE}.py").write_text("")  # a plain module: no model folder inside
    env = {**os.environ, "PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(hide), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("GLUE_DIR", None)  # the check makes its own data
    done = subprocess.run(["bash", str(ROOT / "ci" / "gpu_check.sh"), "--device", "cpu", "--size", "tiny",
                           "--work-dir", str(tmp_path)], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((tmp_path / "report.json").read_text())
    from course_lib.model.model_folder import default_model_dir

    packaged = (default_model_dir() / "vocab.txt").read_text().split()  # visible here, hidden from the check
    assert (tmp_path / "bert-tiny-random" / "vocab.txt").read_text().split() != packaged  # so it made its own
    assert results["parity"]["passed"] and results["parity"]["fp32_hidden_max_abs_diff"] < 1e-4
    assert {case["seq_len"] for case in results["throughput"]["cases"]} == {64}
    assert all(run["finite"] for run in results["methods"]["runs"].values())
    assert set(results["methods"]["runs"]) >= {"vanilla", "ssaf", "asa", "ssa-co", "pretrain ag"}
    assert set(results["notebooks"]["runs"]) == set(notebook_names())
    assert all(run["passed"] for run in results["notebooks"]["runs"].values()), results["notebooks"]  # 01: 'funny'
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


def test_generated_vocabulary_keeps_the_shipped_words_whole(monkeypatch):
    """Without the packaged vocabulary, real sentences must not be cut letter by letter: the loop's padded
    lengths would be those of another tokenizer, and notebook 01's check of the word 'funny' would find no token."""
    import transformers

    from course_lib.model import model_folder
    from course_lib.runtime.errors import UsageError

    def absent():
        raise UsageError("no package")
    monkeypatch.setattr(model_folder, "default_model_dir", absent)
    words = gpu_check.vocabulary(30522)
    assert len(words) == 30522 and len(set(words)) == 30522 and words[:5] == gpu_check.SPECIALS
    tokenizer = transformers.BertTokenizerFast(vocab={w: i for i, w in enumerate(words)}, do_lower_case=True)
    sentence = "a funny and warm story about two brothers who never quite grow up"
    assert tokenizer.tokenize(sentence) == sentence.split()


def test_loop_compile_settings_are_checked_before_any_work():
    from course_lib.runtime.errors import UsageError

    assert gpu_check.parse_args(["--device", "cpu", "--loop-compile", "off, default"]).loop_compile == ("off", "default")
    assert gpu_check.parse_args(["--device", "cpu"]).loop_compile is None  # the section's own choice
    for bad, says in (("fast", "valid: default, graphs, off"), ("graphs", "needs --device cuda")):
        with pytest.raises(UsageError, match=says):
            gpu_check.parse_args(["--device", "cpu", "--loop-compile", bad])
