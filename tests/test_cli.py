"""The command lines' contract: a mistake is one line on stderr and exit code 2 before any training, and
--help says what each option means, its default and its valid values."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
import torch

from course_lib.lab import notebooks
import benchmarks.__main__ as bench_command
from course_lib.model.config import BertConfig, check_mixed_precision
from course_lib.model.weights import check_fits_model
from course_lib.model.model_folder import default_model_dir
from course_lib import cli
from course_lib.runtime import command_line
from course_lib.runtime.errors import UsageError
from course_lib.tasks.glue import GLUE_TASKS
from course_lib.tasks.registry import every_task
from course_lib.training.config import FinetuneConfig, MultitaskConfig, PretrainConfig, RunConfig, TrainingRunConfig

CONFIGS = {"finetune": FinetuneConfig, "pretrain": PretrainConfig, "multitask": MultitaskConfig}

ROOT = Path(__file__).resolve().parent.parent


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


# ----------------------------------------------------------------------------------------------
# Sequences longer than the model's positions


def test_max_len_beyond_the_models_positions_exits_2_before_training(tiny_model_dir, keyword_glue, tmp_path):
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "course_lib", "finetune", "--model", str(tiny_model_dir),
            "--glue-dir", str(keyword_glue), "--max-len", "65", "--output-dir", str(out),
            "--epochs", "1", "--max-train-samples", "8", "--max-eval-samples", "8"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "CI": "true", "TQDM_DISABLE": "1"})
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "max_len 65" in done.stderr and "max_position_embeddings 64" in done.stderr
    assert not out.exists()  # refused before the run folder was made


def test_max_len_that_fits_passes_the_check(tiny_model_dir):
    check_fits_model(64, tiny_model_dir)
    with pytest.raises(UsageError, match="max_len 513 is more than the model's max_position_embeddings 512"):
        check_fits_model(513, default_model_dir())  # the packaged MiniLM


@pytest.mark.parametrize("command", ["finetune", "multitask"])
def test_max_len_is_checked_for_every_command_with_a_pretrained_model(command, tiny_model_dir, tmp_path, capsys):
    argv = [command, "--model", str(tiny_model_dir), "--max-len", "100", "--glue-dir", str(tmp_path / "none")]
    assert cli.main(argv) == 2
    err = one_line(capsys)
    assert "max_len 100" in err and "max_position_embeddings 64" in err


# ----------------------------------------------------------------------------------------------
# fp16 without a GPU


@pytest.mark.parametrize("command", ["finetune", "multitask", "pretrain"])
def test_fp16_without_a_gpu_is_refused_before_training(command, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    argv = [command, "--mixed-precision", "fp16", "--glue-dir", str(tmp_path / "none"),
            "--output-dir", str(tmp_path / "run")]
    assert cli.main(argv) == 2
    err = one_line(capsys)
    assert "mixed_precision 'fp16' needs a CUDA GPU" in err and "bf16" in err
    assert not (tmp_path / "run").exists()


def test_fp16_passes_with_a_gpu_and_bf16_without(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    check_mixed_precision("fp16")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    check_mixed_precision("bf16")
    check_mixed_precision("no")
    FinetuneConfig(mixed_precision="fp16")  # a saved GPU run's config still loads on a CPU


# ----------------------------------------------------------------------------------------------
# Range errors name the one field that is wrong


@pytest.mark.parametrize("cls, field, value, rule, owner", [
    (FinetuneConfig, "save_every", -1, ">= 0", None),
    (FinetuneConfig, "weight_decay", -0.1, ">= 0", None),
    (FinetuneConfig, "max_grad_norm", -1.0, ">= 0", None),
    (FinetuneConfig, "asa_tau", -0.5, ">= 0", ("asa", "ASAOptions")),  # a method's option: its options class
    (FinetuneConfig, "bernoulli_p", 1.0, "in [0, 1)", ("bernoulli-mask", "BernoulliOptions")),
    (FinetuneConfig, "ssa_target_weight", 1.5, "in [0, 1]", ("ssa-co", "SSAOptions")),
    (FinetuneConfig, "ssa_cls_weight", -0.5, "in [0, 1]", ("ssa-hybrid", "SSAHybridOptions")),
    (MultitaskConfig, "save_every", -2, ">= 0", None),
    (MultitaskConfig, "schedule_alpha_end", 1.5, "in [0, 1]", None),
    (MultitaskConfig, "ssa_target_weight", -0.1, "in [0, 1]", (None, "SSAOptions")),
])
def test_range_error_names_the_bad_field_and_its_value(cls, field, value, rule, owner):
    method, name = owner or (None, cls.__name__)
    with pytest.raises(UsageError) as err:
        cls.from_dict({field: value, **({"method": method} if method else {})})
    assert str(err.value) == f"{name}.{field} must be {rule}, got {value!r}"


def test_assignment_is_checked_as_construction_is():
    cfg = FinetuneConfig()
    with pytest.raises(UsageError) as err:
        cfg.lr = -1
    assert str(err.value) == "FinetuneConfig.lr must be > 0, got -1" and cfg.lr == 2e-5
    with pytest.raises(UsageError, match=r"^unknown mixed_precision 'fp8' \(valid: no, fp16, bf16\)$"):
        cfg.mixed_precision = "fp8"
    with pytest.raises(AttributeError, match="FinetuneConfig has no field 'doc_stride'"):
        cfg.doc_stride = 64  # a span-QA run's stride is cfg.task_options'
    cfg.options = None  # None is the method's defaults, as on construction
    assert cfg.options is not None and cfg.to_dict() == FinetuneConfig().to_dict()


def test_a_float_that_yaml_11_reads_as_text_is_the_number_and_types_stay_strict():
    cfg = FinetuneConfig.from_dict({"lr": "5e-5", "method": "asa", "asa_tau": "1e-1"})
    assert (cfg.lr, cfg.options.asa_tau) == (5e-5, 0.1)
    with pytest.raises(UsageError, match=r"^FinetuneConfig.lr must be float or int, got 'fast' \(str\)$"):
        FinetuneConfig(lr="fast")
    with pytest.raises(UsageError, match=r"^FinetuneConfig.epochs must be int, got 2.5 \(float\)$"):
        FinetuneConfig(epochs=2.5)
    assert type(FinetuneConfig(lr=1).lr) is float  # an int where a float is expected: the float, as saved


def test_save_every_minus_one_on_the_command_line(capsys):
    assert cli.main(["finetune", "--save-every", "-1"]) == 2
    assert "FinetuneConfig.save_every must be >= 0, got -1" in one_line(capsys)


# ----------------------------------------------------------------------------------------------
# --help


def help_text(argv, capsys, monkeypatch, main=cli.main) -> str:
    monkeypatch.setenv("COLUMNS", "1000")  # no wrapping inside a description
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 0
    return capsys.readouterr().out


def bench_help(argv, capsys, monkeypatch) -> str:
    return help_text(argv, capsys, monkeypatch, main=bench_command.main)


def option_help(text: str) -> dict[str, str]:
    """Each option's entry of the help, on one line, by its first flag (a long flag's text starts below it)."""
    body = "\n".join(line for line in text.split("\noptions:", 1)[1].splitlines() if line.startswith(" "))
    entries = re.split(r"\n  (?=-)", "\n" + body)[1:]  # each starts with its flags; group titles left out
    return {entry.split()[0].rstrip(","): " ".join(entry.split()) for entry in entries}


def field_docs(cls) -> dict[str, str | None]:
    return {name: f.description for name, f in cls.model_fields.items()}


def test_every_config_field_is_documented():
    for cls in CONFIGS.values():
        assert [name for name, doc in field_docs(cls).items() if not doc] == [], cls.__name__


def test_the_shared_fields_are_documented_once_and_keep_each_commands_defaults():
    for base, classes in ((RunConfig, (FinetuneConfig, MultitaskConfig, PretrainConfig)),
                          (TrainingRunConfig, (FinetuneConfig, MultitaskConfig))):
        shared = field_docs(base)
        for cls in classes:
            assert {name: field_docs(cls)[name] for name in shared} == shared, cls.__name__
    defaults = {name: f.default for name, f in TrainingRunConfig.model_fields.items()}
    for cls in (FinetuneConfig, MultitaskConfig):
        assert {name: f.default for name, f in cls.model_fields.items() if name in defaults} == defaults
    shared = {name: f.default for name, f in RunConfig.model_fields.items()}
    changed = {name: f.default for name, f in PretrainConfig.model_fields.items()
               if shared.get(name, f.default) != f.default}
    assert changed == {"lr": 1e-4, "weight_decay": 0.0, "log_every": 10}  # the AG paper's recipe; a denser curve
    assert PretrainConfig.model_fields["lr"].metadata == RunConfig.model_fields["lr"].metadata  # its range kept
    assert (FinetuneConfig().output_dir, MultitaskConfig().output_dir) == ("runs/finetune", "runs/multitask")


@pytest.mark.parametrize("command", sorted(CONFIGS))
def test_help_gives_each_options_description_and_default(command, capsys, monkeypatch):
    entries = option_help(help_text([command, "--help"], capsys, monkeypatch))
    cls = CONFIGS[command]
    flat = cls.flat_hints()  # a field that holds a method's options is no flag: its fields are
    for owner in (cls, *cls.option_classes()):
        for name, f in owner.model_fields.items():
            if name in flat:
                entry = entries["--" + name.replace("_", "-")]
                assert f.description in entry and entry.endswith(f"(default: {f.default})"), entry


def test_help_lists_the_valid_names(capsys, monkeypatch):
    entries = option_help(help_text(["finetune", "--help"], capsys, monkeypatch))
    assert f"(valid: {', '.join(every_task())})" in entries["--task"] and {*GLUE_TASKS, "squad", "squad_v2"} <= set(every_task())
    assert "ssa-hybrid" in entries["--method"] and "bernoulli-mask" in entries["--method"]
    assert "(valid: no, fp16, bf16)" in entries["--mixed-precision"]


def test_top_level_help_lists_every_command(capsys, monkeypatch):
    text = help_text(["--help"], capsys, monkeypatch)
    for command in ("finetune", "pretrain", "multitask", *cli.COMMANDS):
        assert re.search(rf"^\s+{command}\s+\S", text, re.M), command


@pytest.mark.parametrize("command", sorted(cli.COMMANDS))
def test_every_command_runs_from_the_one_entry_point_with_its_own_help(command, capsys, monkeypatch):
    text = help_text([command, "--help"], capsys, monkeypatch)
    assert text.startswith(f"usage: python -m course_lib {command} ")


def test_a_commands_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    assert cli.main(["sweep", str(tmp_path / "no-grid.yaml")]) == 2
    err = one_line(capsys)
    assert "no-grid.yaml" in err


# ----------------------------------------------------------------------------------------------
# The notebook runner's messages


def test_notebook_set_of_a_yaml_11_float_is_read_as_the_number():
    """PyYAML reads `5e-5` (no '.') as text; a float parameter takes the number, as its writer means it."""
    assert notebooks.check_parameters("00_bert_from_scratch", {"lr": yaml.safe_load("5e-5")}, "--set") == {"lr": 5e-5}
    with pytest.raises(UsageError, match=r"^--set: 00_bert_from_scratch.lr must be float or int or None, got 'fast'"):
        notebooks.check_parameters("00_bert_from_scratch", {"lr": "fast"}, "--set")


def test_missing_kernel_gives_the_command_that_installs_it(capsys):
    assert notebooks.main(["run", "00_bert_from_scratch", "--kernel", "no-such-kernel"]) == 2
    err = one_line(capsys)
    assert "make kernel" not in err
    assert "-m ipykernel install --sys-prefix --name attention-lab" in err


# ----------------------------------------------------------------------------------------------
# A checkpoint of another activation


@pytest.mark.parametrize("hidden_act", [None, "gelu"])
def test_a_gelu_checkpoint_or_one_that_names_none_loads(hidden_act, tmp_path):
    raw = {"model_type": "bert", "hidden_size": 32, "num_attention_heads": 2}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw if hidden_act is None else {**raw, "hidden_act": hidden_act}))
    assert BertConfig.from_hf_json(path).hidden_size == 32


def test_a_checkpoint_with_another_activation_is_refused_in_one_line(tiny_model_dir, tmp_path, capsys):
    model = shutil.copytree(tiny_model_dir, tmp_path / "relu_bert")
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "hidden_act": "relu"}))
    assert cli.main(["finetune", "--model", str(model), "--glue-dir", str(tmp_path / "none")]) == 2
    assert f"{model / 'config.json'} has hidden_act 'relu'; this BERT implements gelu only (valid: gelu)" in \
        one_line(capsys)


# ----------------------------------------------------------------------------------------------
# bench: one sub-command per measurement, each with its own options


def test_each_bench_takes_only_its_own_options(capsys):
    assert bench_command.main(["squad", "--seq-lens", "64"]) == 2
    err = one_line(capsys)
    assert "unknown option '--seq-lens' for bench squad (valid: --epochs, --json, --model, --output-dir" in err
    assert bench_command.main(["memory", "--grid", "x.yaml"]) == 2
    assert "unknown option '--grid' for bench memory (valid: --json, --model, --repeats)" in one_line(capsys)


@pytest.mark.parametrize("what", sorted(bench_command.BENCHES))
def test_each_bench_lists_its_options_in_its_help(what, capsys, monkeypatch):
    text = bench_help([what, "--help"], capsys, monkeypatch)
    flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", text.split("\noptions:", 1)[1])) - {"--help"}
    declared = set(command_line.flags(bench_command.BENCHES[what][2]))
    assert declared <= flags and {f for f in flags if not f.startswith("--no-")} <= declared


def test_a_training_command_loads_only_its_runs_method_and_family_and_help_loads_every_one():
    """Names are resolved for the run: `finetune --task sst2 --method ssa-co` imports SSA and the sentence family,
    never ASA, SSAF or SQuAD's reader; only --help lists (and so loads) them all."""
    watched = ["course_lib.methods.asa", "course_lib.methods.ssaf", "course_lib.methods.ssa",
               "course_lib.tasks.squad", "course_lib.tasks.tagging", "course_lib.tasks.sentence"]
    code = ("import json, sys\nfrom course_lib import cli\n"
            "seen = []\ncli._train = lambda command, cfg: seen.append(cfg.options.ssa_target_weight) or {}\n"
            "cli.keep_freed_memory = lambda *args: None\n"
            "cli.run(sys.argv[1:])\n"
            f"print(json.dumps([seen, [m for m in {watched!r} if m in sys.modules]]))\n")
    run = subprocess.run([sys.executable, "-c", code, "finetune", "--task", "sst2", "--method", "ssa-co",
                          "--ssa-target-weight", "0.9"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout.splitlines()[-1]) == [[0.9], ["course_lib.methods.ssa", "course_lib.tasks.sentence"]]
    helped = subprocess.run([sys.executable, "-c", code, "finetune", "--help"], capture_output=True, text=True,
                            cwd=ROOT, timeout=300)
    assert "--asa-tau" in helped.stdout and "--doc-stride" in helped.stdout  # every method's and family's options
