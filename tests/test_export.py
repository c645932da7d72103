"""`export`: a finished run as a Hugging Face folder that transformers' `AutoModelFor...` loads, giving our model's
logits (fp32, within 1e-5) on the dev set's first batch, for every task family; methods whose inference model is
not BERT's are refused in one line, before any training when asked through the run option."""
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers

from course_lib import cli
from course_lib.runtime.errors import UsageError
from course_lib.training.export import EXPORT_DIR, export_run
from course_lib.runtime.repro import METRICS
from course_lib.tasks.registry import get_family, run_task
from course_lib.training.config import FinetuneConfig
from course_lib.training.finetune import finetune, split_examples
from course_lib.training.task_model import load_finetuned

ROOT = Path(__file__).resolve().parent.parent
AUTO = {"BertForSequenceClassification": transformers.AutoModelForSequenceClassification,
        "BertForTokenClassification": transformers.AutoModelForTokenClassification,
        "BertForQuestionAnswering": transformers.AutoModelForQuestionAnswering,
        "BertForMultipleChoice": transformers.AutoModelForMultipleChoice}
SMALL = {"max_train_samples": 24, "max_eval_samples": 16, "epochs": 1, "batch_size": 8, "lr": 1e-3}


@pytest.fixture(scope="module")
def choice_files(tmp_path_factory) -> tuple[Path, Path]:
    """HellaSWAG-style lines: four endings, the right one repeats the context's colour."""
    folder, rng, colours = tmp_path_factory.mktemp("choices"), random.Random(0), ["red", "blue", "green", "yellow"]
    paths = []
    for split, n in (("train", 24), ("dev", 16)):
        lines = []
        for i in range(n):
            colour, label = rng.choice(colours), rng.randrange(4)
            endings = [f"the {c} one" for c in colours if c != colour]
            endings.insert(label, f"the {colour} one")
            lines.append(json.dumps({"ind": i, "ctx": f"she threw the {colour} ball", "endings": endings,
                                     "label": label}))
        (folder / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
        paths.append(folder / f"{split}.jsonl")
    return paths[0], paths[1]


def _run(case: str, tmp_path: Path, model: Path, choice_files, **extra) -> Path:
    task, method = case.split(":")
    options = {"task": task, "method": method, "max_len": 48, **SMALL}
    if task == "custom":
        options.update(task_type="multiple-choice", train_file=str(choice_files[0]),
                       validation_file=str(choice_files[1]), max_len=24)
    if task == "squad_articles":
        options.update(max_len=64, doc_stride=24, max_query_length=16)
    out = tmp_path / "run"
    finetune(FinetuneConfig.from_dict({**options, **extra, "model": str(model), "output_dir": str(out)}))
    return out


def _first_dev_batch_logits(run_dir: Path, hf_dir: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """Our model's logits and the exported folder's, on the first 8 features of the run's first dev split."""
    cfg = FinetuneConfig.from_dict(json.loads((run_dir / METRICS).read_text())["config"])
    task = run_task(cfg)
    family = get_family(task.family)
    model, tokenizer = load_finetuned(run_dir)
    features = family.encode(split_examples(cfg, task, family, task.dev_splits[0]), tokenizer, cfg, training=False)
    batch = family.collate(features[:8], tokenizer.pad_token_id)
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in batch}
    hf = AUTO[family.hf_class].from_pretrained(hf_dir).eval()
    with torch.no_grad():
        ours, out = model.logits(**inputs)[0], hf(**inputs)
    theirs = torch.stack([out.start_logits, out.end_logits], -1) if hasattr(out, "start_logits") else out.logits
    return ours, theirs


@pytest.mark.parametrize("case", ["sst2:vanilla", "stsb:asa", "sst2:ssa-co", "wnut17:bernoulli-mask",
                                  "squad_articles:vanilla", "custom:vanilla"])
def test_an_exported_run_gives_our_logits_in_transformers(case, tiny_model_dir, choice_files, tmp_path):
    run_dir = _run(case, tmp_path, tiny_model_dir, choice_files)
    hf_dir = export_run(run_dir)
    assert hf_dir == run_dir / EXPORT_DIR and (hf_dir / "model.safetensors").is_file()
    assert (hf_dir / "tokenizer.json").is_file() or (hf_dir / "vocab.txt").is_file()
    ours, theirs = _first_dev_batch_logits(run_dir, hf_dir)
    assert ours.shape == theirs.shape
    assert torch.allclose(ours, theirs, rtol=0, atol=1e-5), (ours - theirs).abs().max()
    config = json.loads((hf_dir / "config.json").read_text())
    task = run_task(FinetuneConfig.from_dict({"task": case.split(":")[0]})) if not case.startswith("custom") else None
    if task is not None and getattr(task, "label_names", None):
        assert [config["id2label"][str(i)] for i in range(len(task.label_names))] == list(task.label_names)
    assert (config.get("problem_type") == "regression") == case.startswith("stsb")


def test_the_run_option_exports_when_the_run_completes_and_is_no_part_of_the_runs_identity(
        tiny_model_dir, choice_files, tmp_path):
    run_dir = _run("sst2:vanilla", tmp_path, tiny_model_dir, choice_files)
    assert not (run_dir / EXPORT_DIR).exists()  # off by default
    _run("sst2:vanilla", tmp_path, tiny_model_dir, choice_files, export=True)  # the finished run, now exported
    assert (run_dir / EXPORT_DIR / "config.json").is_file()


@pytest.mark.parametrize("method", ["ssaf", "ssa-hybrid", "mean-pool"])
def test_a_method_whose_model_is_not_berts_is_refused_before_training(method, tiny_model_dir, tmp_path):
    with pytest.raises(UsageError, match=rf"method '{method}' cannot be exported as a transformers BERT: its "):
        FinetuneConfig(method=method, export=True, output_dir=str(tmp_path))
    assert not any(tmp_path.iterdir())


def test_the_export_command_refuses_a_refused_method_and_a_folder_without_a_run(tiny_model_dir, choice_files,
                                                                                tmp_path, capsys):
    assert cli.main(["export", str(tmp_path / "nothing")]) == 2
    assert "holds no completed fine-tuning run" in capsys.readouterr().err
    run_dir = _run("sst2:ssaf", tmp_path, tiny_model_dir, choice_files)
    capsys.readouterr()  # the run's own output
    assert cli.main(["export", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "sparsegen-lin" in err and not (run_dir / EXPORT_DIR).exists()


def test_the_export_command_writes_where_it_is_told(tiny_model_dir, choice_files, tmp_path):
    run_dir = _run("sst2:vanilla", tmp_path, tiny_model_dir, choice_files)
    target = tmp_path / "shared" / "my-sst2"
    done = subprocess.run([sys.executable, "-m", "course_lib", "export", str(run_dir), "--to", str(target)],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"exported to {target}"
    pipe = transformers.pipeline("text-classification", model=str(target), tokenizer=str(target))
    assert pipe("a fine film")[0]["label"] in ("0", "1")  # SST-2's label names, as its files write them


def test_the_export_option_takes_true_or_false_only():
    with pytest.raises(UsageError, match=r"FinetuneConfig.export must be bool, got 'yes' \(str\)"):
        FinetuneConfig.from_dict({"export": "yes"})
