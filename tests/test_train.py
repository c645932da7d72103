"""The fine-tuning loop: determinism, resume after SIGKILL, refusal of foreign checkpoints, faults, quality."""
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from course_lib.runtime.errors import UsageError
from course_lib.training.config import FinetuneConfig
from course_lib.training.finetune import finetune

ROOT = Path(__file__).resolve().parents[1]


def tiny_args(model_dir, glue_dir, out, **extra) -> list[str]:
    args = {"task": "sst2", "model": str(model_dir), "glue_dir": str(glue_dir), "output_dir": str(out),
            "epochs": 3, "batch_size": 16, "max_len": 32, "lr": 1e-3, "warmup_ratio": 0.1, "seed": 0, **extra}
    return [x for k, v in args.items() for x in (f"--{k.replace('_', '-')}", str(v))]


def run_cli(args, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "CI": "true", "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "course_lib", "finetune", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, **kwargs)


def numbers(path: Path) -> dict:
    """metrics.json without the wall-clock timings (the run's, and SSA's labelling time per epoch), the one thing
    allowed to differ."""
    result = json.loads((path / "metrics.json").read_text())
    result.pop("timing")
    result["config"].pop("output_dir")
    for entry in result["history"]:
        entry.pop("label_seconds", None)
    return result


def test_same_command_twice_gives_identical_metrics(tiny_model_dir, keyword_glue, tmp_path):
    runs = [tmp_path / "a", tmp_path / "b"]
    for out in runs:
        cfg = FinetuneConfig.from_dict({"task": "sst2", "model": str(tiny_model_dir), "glue_dir": str(keyword_glue),
                                        "output_dir": str(out), "epochs": 2, "batch_size": 16, "max_len": 32,
                                        "lr": 1e-3})
        finetune(cfg)
    first, second = numbers(runs[0]), numbers(runs[1])
    assert first == second
    assert first["status"] == "complete" and len(first["history"]) == 2
    assert (runs[0] / "model.safetensors").exists() and not (runs[0] / "checkpoint.pt").exists()
    started = time.perf_counter()
    again = finetune(cfg)  # the same command after completion: nothing to do
    assert time.perf_counter() - started < 1.0 and again["dev"] == second["dev"]


@pytest.mark.parametrize("method", ["vanilla", "ssa-co"])  # SSA-Co's resume reads its epoch cache back too
def test_resume_after_sigkill_matches_an_uninterrupted_run(method, tiny_model_dir, keyword_glue, tmp_path):
    reference = run_cli(tiny_args(tiny_model_dir, keyword_glue, tmp_path / "ref", save_every=2, method=method))
    assert reference.returncode == 0, reference.stderr
    killed_dir = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "course_lib", "finetune",
                             *tiny_args(tiny_model_dir, keyword_glue, killed_dir, save_every=2, method=method)],
                            cwd=ROOT, env={**os.environ, "CI": "true", "HF_HUB_OFFLINE": "1"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # Optimiser steps: 12 an epoch, 36 in all, a checkpoint every 2. Seeded (it draws 15), so a failure
    # reproduces: the kill comes at the first checkpoint from step 16 on, in or after epoch 2, so the resume
    # restores a finished epoch's history and, unless the poll lags to step 24, a position inside an epoch.
    kill_after = random.Random(0).randint(3, 25)
    deadline = time.time() + 900  # generous: on a loaded machine start-up alone can take minutes
    while time.time() < deadline and proc.poll() is None:
        ckpt = killed_dir / "checkpoint.pt"
        if ckpt.exists():
            try:
                if torch.load(ckpt, weights_only=True)["state"]["global_step"] >= kill_after:
                    break
            except Exception:
                pass  # a rename is atomic, but the file can be replaced while we read it
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert (killed_dir / "checkpoint.pt").exists(), "no checkpoint before the deadline: the run never got going"
    state = torch.load(killed_dir / "checkpoint.pt", weights_only=True)["state"]
    assert kill_after <= state["global_step"] < 36, f"killed at step {state['global_step']}, not after {kill_after}"
    resumed = run_cli(tiny_args(tiny_model_dir, keyword_glue, killed_dir, save_every=2, method=method))
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming" in resumed.stdout
    assert numbers(killed_dir) == numbers(tmp_path / "ref")
    assert not list(killed_dir.glob(".*.tmp")), "a temporary file was left behind"


def test_refuses_a_different_runs_checkpoint(tiny_model_dir, keyword_glue, tmp_path):
    assert run_cli(tiny_args(tiny_model_dir, keyword_glue, tmp_path, epochs=1)).returncode == 0
    other = run_cli(tiny_args(tiny_model_dir, keyword_glue, tmp_path, epochs=1, lr=5e-4))
    assert other.returncode == 2
    assert other.stderr.strip().count("\n") == 0, "the error must be one line"
    assert "different run's checkpoint (lr=0.001" in other.stderr


def test_nonfinite_loss_stops_and_keeps_the_checkpoint(tiny_model_dir, keyword_glue, tmp_path):
    result = run_cli(tiny_args(tiny_model_dir, keyword_glue, tmp_path, lr=1e30, max_grad_norm=0, save_every=1))
    assert result.returncode == 1
    assert "loss is nan" in result.stderr or "loss is inf" in result.stderr
    assert "Traceback" not in result.stderr
    torch.load(tmp_path / "checkpoint.pt", weights_only=True)  # still a readable checkpoint
    skipped = run_cli(tiny_args(tiny_model_dir, keyword_glue, tmp_path / "skip", lr=1e30, max_grad_norm=0,
                                on_nonfinite_loss="skip"))
    assert skipped.returncode == 0, skipped.stderr
    assert json.loads((tmp_path / "skip" / "metrics.json").read_text())["skipped_steps"] > 0


@pytest.mark.parametrize("args, message", [
    (["--task", "sst3"], "unknown task 'sst3' (valid: anli, cola, conll2003, cs224n_cfimdb, cs224n_para, cs224n_sst, cs224n_sts, "
     "custom, dream"),
    (["--method", "magic"], "unknown method 'magic' (valid: asa, bernoulli-mask, bert-mask, mean-pool, ssa-co, ssa-hybrid, ssaf, vanilla)"),
    (["--epochs", "two"], "argument --epochs: invalid int value: 'two'"),
    (["--frobnicate", "1"], "unknown option '--frobnicate' for finetune (valid: --batch-size, --bucket-by-length, "
     "--classifier-dropout"),  # the run's own options: vanilla has none of its own
    (["--method", "asa", "--asa-tagging-divergence", "sum"],
     "unknown asa_tagging_divergence 'sum' (valid: window-sum, word-mean)"),
    (["--asa-tau", "0.5"], "option 'asa_tau' belongs to method asa, not to this run (its own options: "
                           "text_columns, label_column, labels)"),
    (["--lr", "-1"], "FinetuneConfig.lr must be > 0, got -1.0"),
    (["--compile", "fast"], "unknown compile 'fast' (valid: off, default, graphs)"),
    (["--log-every", "0"], "FinetuneConfig.log_every must be > 0, got 0"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, capsys, monkeypatch):
    """The command's own entry point in this process (a fresh process costs seconds per case: the one below),
    refused before it touches this process's malloc or starts a run."""
    from course_lib import cli

    def started(*args, **kwargs):
        raise AssertionError("the command went past its checks")

    monkeypatch.setattr(cli, "keep_freed_memory", started)
    monkeypatch.setattr(cli, "_train", started)
    assert cli.main(["finetune", *args]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.strip().count("\n") == 0 and "Traceback" not in err


def test_a_bad_input_found_when_the_data_is_read_is_one_line_and_exit_2_from_the_process():
    """A real process: its exit code and its whole stderr, for a mistake found after the config was accepted."""
    result = run_cli(["--glue-dir", "/nonexistent/glue"])
    assert result.returncode == 2
    assert "/nonexistent/glue" in result.stderr
    assert result.stderr.strip().count("\n") == 0 and "Traceback" not in result.stderr


def test_config_rejects_unknown_keys_and_wrong_types():
    with pytest.raises(UsageError, match="unknown FinetuneConfig option 'epoch'"):
        FinetuneConfig.from_dict({"epoch": 3})
    with pytest.raises(UsageError, match="FinetuneConfig.epochs must be int, got '3'"):
        FinetuneConfig.from_dict({"epochs": "3"})
    with pytest.raises(UsageError, match="bucket_by_length must be bool"):
        FinetuneConfig.from_dict({"bucket_by_length": 1})


@pytest.mark.glue
def test_loss_falls_on_real_sst2(glue_dir, tmp_path):
    cfg = FinetuneConfig(task="sst2", glue_dir=str(glue_dir), output_dir=str(tmp_path), max_train_samples=384,
                         max_eval_samples=200, epochs=2, max_len=64, batch_size=16, lr=1e-4, bucket_by_length=True)
    result = finetune(cfg)
    losses = [h["train_loss"] for h in result["history"]]
    assert losses[1] < losses[0] < 0.75
    assert result["dev"]["accuracy"] > 0.7


@pytest.mark.glue
@pytest.mark.slow
def test_sst2_recipe_reaches_083(glue_dir, tmp_path):
    """The issue's recipe: 4,000 SST-2 examples, 2 epochs, length 64, batch 32, lr 5e-5, 6% warmup.

    Batches are length-bucketed, which halves the run (93 s against 187 s on 2 cores) at no measurable cost:
    seeds 0/1/2 gave 0.8349/0.8303/0.8406 bucketed and 0.8417/0.8429/0.8303 with random batches (2026-11-22).
    """
    cfg = FinetuneConfig(task="sst2", glue_dir=str(glue_dir), output_dir=str(tmp_path), max_train_samples=4000,
                         epochs=2, max_len=64, batch_size=32, lr=5e-5, warmup_ratio=0.06, seed=0,
                         bucket_by_length=True)
    assert finetune(cfg)["dev"]["accuracy"] >= 0.83


@pytest.mark.slow
def test_two_cpu_processes_match_one(tiny_model_dir, keyword_glue, tmp_path):
    """`accelerate launch --num_processes 2 --cpu` (gloo) splits each batch; the numbers must agree."""
    single = run_cli(tiny_args(tiny_model_dir, keyword_glue, tmp_path / "one", epochs=2))
    assert single.returncode == 0, single.stderr
    env = {**os.environ, "CI": "true", "HF_HUB_OFFLINE": "1"}
    launcher = Path(sys.executable).with_name("accelerate")
    double = subprocess.run([str(launcher), "launch", "--num_processes", "2", "--num_machines", "1", "--cpu",
                             "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "course_lib", "finetune",
                             *tiny_args(tiny_model_dir, keyword_glue, tmp_path / "two", epochs=2)],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert double.returncode == 0, double.stderr[-3000:]
    one, two = numbers(tmp_path / "one"), numbers(tmp_path / "two")
    for a, b in zip(one["history"], two["history"], strict=True):
        assert abs(a["train_loss"] - b["train_loss"]) < 1e-4  # float sums in another order, nothing more
        assert abs(a["dev"]["accuracy"] - b["dev"]["accuracy"]) <= 1 / 64  # at most one of 64 dev examples


@pytest.mark.parametrize("warmup, total", [(0, 10), (3, 10), (10, 10), (4, 37)])
def test_the_learning_rate_schedule_is_hugging_faces_linear_warmup_step_by_step(warmup, total):
    """The loop's schedule is transformers' get_linear_schedule_with_warmup, which the papers' code used: the same
    learning rate at every step, warmup's first step at 0 included."""
    from transformers import get_linear_schedule_with_warmup

    from course_lib.training.loop import linear_warmup_decay

    def rates(make) -> list[float]:
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2e-5)
        scheduler, seen = make(optimizer), []
        for _ in range(total + 1):
            seen.append(scheduler.get_last_lr()[0])
            optimizer.step()
            scheduler.step()
        return seen

    ours = rates(lambda o: linear_warmup_decay(o, warmup, total))
    assert ours == pytest.approx(rates(lambda o: get_linear_schedule_with_warmup(o, warmup, total)), rel=1e-12, abs=0)


def test_a_skipped_step_is_left_out_of_the_epochs_mean_loss(tiny_model_dir, keyword_glue, tmp_path, monkeypatch):
    """on_nonfinite_loss=skip: one step's loss made NaN is skipped; the epoch's logged train_loss and the method's
    statistics (ASA's cut share per layer) are means over the steps taken, as each step computed them (recorded
    here, outside the loop's sums)."""
    from course_lib.training import finetune as finetune_module

    real, taken, cut = finetune_module.batch_loss, [], []

    def one_bad_step(*args, **kwargs):
        loss, stats = real(*args, **kwargs)
        if len(taken) == 2 and not hasattr(one_bad_step, "done"):
            one_bad_step.done = True
            return loss * float("nan"), stats
        taken.append(loss.item())
        cut.append([float(share) for share in stats["masked_fraction"]])
        return loss, stats

    monkeypatch.setattr(finetune_module, "batch_loss", one_bad_step)
    cfg = FinetuneConfig.from_dict({"task": "sst2", "model": str(tiny_model_dir), "glue_dir": str(keyword_glue),
                                    "epochs": 1, "batch_size": 16, "max_len": 32, "lr": 1e-3, "method": "asa",
                                    "on_nonfinite_loss": "skip", "output_dir": str(tmp_path / "run")})
    result = finetune(cfg)
    assert result["skipped_steps"] == 1 and len(taken) == result["train_steps"] - 1
    epoch = result["history"][0]
    assert epoch["train_loss"] == pytest.approx(sum(taken) / len(taken), rel=1e-6)
    assert epoch["masked_fraction"] == pytest.approx(torch.tensor(cut, dtype=torch.float64).mean(0).tolist(), rel=1e-6)


def test_one_process_runs_bf16_then_full_precision(tiny_model_dir, keyword_glue, tmp_path):
    """A notebook's kernel may run a bf16 fine-tune and then an fp32 one (the GPU check's methods, then notebook
    00's paper preset): accelerate's process-wide state refused the second until the loop cleared it."""
    precisions = []
    for mixed in ("bf16", "no"):
        cfg = FinetuneConfig.from_dict({"task": "sst2", "model": str(tiny_model_dir), "glue_dir": str(keyword_glue),
                                        "output_dir": str(tmp_path / mixed), "epochs": 1, "batch_size": 16,
                                        "max_len": 32, "max_train_samples": 32, "mixed_precision": mixed})
        finetune(cfg)
        precisions.append(json.loads((tmp_path / mixed / "metrics.json").read_text())["config"]["mixed_precision"])
    from accelerate.state import AcceleratorState

    assert precisions == ["bf16", "no"] and AcceleratorState().mixed_precision == "no"


def _grad_norm(parameters) -> float:
    """The global L2 norm of the gradients the parameters hold, as clip_grad_norm_ measures it."""
    grads = [p.grad.detach().to(torch.float64) for p in parameters if p.grad is not None]
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])).item()


@pytest.mark.parametrize("max_grad_norm", ["0.5", "5", "0"])
def test_max_grad_norm_is_the_global_norm_of_the_gradient_adamw_steps_with(max_grad_norm, tiny_model_dir,
                                                                            keyword_glue, tmp_path, monkeypatch):
    """`finetune --max-grad-norm V` on the command line: every gradient the optimiser is handed has global norm
    min(its norm after backward, V), and V = 0 leaves it as backward made it. The two steps' losses are scaled
    by 1e-3 and 100, so one norm lies below both values and one above: a loop that clipped at 1.0 whatever the
    config said, or not at all, fails here."""
    from accelerate import Accelerator
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    from course_lib import cli
    from course_lib.training import finetune as finetune_module

    real_loss, real_prepare, real_backward = (finetune_module.batch_loss, Accelerator.prepare,
                                              Accelerator.backward)
    model, after_backward, stepped_with = [], [], []

    def scaled_loss(*args, **kwargs):
        loss, stats = real_loss(*args, **kwargs)
        return loss * (1e-3 if len(after_backward) % 2 == 0 else 100.0), stats

    def prepare(self, *objects):
        prepared = real_prepare(self, *objects)
        model.extend(p for p in prepared if isinstance(p, torch.nn.Module))
        return prepared

    def backward(self, loss, **kwargs):
        real_backward(self, loss, **kwargs)
        after_backward.append(_grad_norm(model[0].parameters()))

    monkeypatch.setattr(finetune_module, "batch_loss", scaled_loss)
    monkeypatch.setattr(Accelerator, "prepare", prepare)
    monkeypatch.setattr(Accelerator, "backward", backward)
    hook = register_optimizer_step_pre_hook(lambda optimizer, args, kwargs: stepped_with.append(
        _grad_norm(p for group in optimizer.param_groups for p in group["params"])))
    out = tmp_path / "run"
    try:
        assert cli.main(["finetune", *tiny_args(tiny_model_dir, keyword_glue, out, epochs=1, max_train_samples=32,
                                                max_eval_samples=16, max_grad_norm=max_grad_norm)]) == 0
    finally:
        hook.remove()
    value = float(max_grad_norm)
    assert json.loads((out / "metrics.json").read_text())["config"]["max_grad_norm"] == value
    assert len(after_backward) == len(stepped_with) == 2, (after_backward, stepped_with)
    assert after_backward[0] < 0.5 and after_backward[1] > 5, after_backward  # one below both values, one above
    expected = [min(norm, value) if value > 0 else norm for norm in after_backward]
    assert stepped_with == pytest.approx(expected, rel=1e-4)


@pytest.mark.parametrize("stop_after", ["save_checkpoint", "write_metrics"])
def test_a_run_resumed_from_an_end_of_epoch_checkpoint_lists_each_epoch_once_and_ends_as_if_never_stopped(
        stop_after, tiny_model_dir, keyword_glue, tmp_path, monkeypatch):
    """Without --save-every a run's only checkpoints are written at each epoch's end. The process stops right
    after epoch 1's (before its metrics.json is written, or just after); the same command resumes at epoch 2,
    metrics.json's history lists epochs 1, 2 and 3 once each, and every number equals an uninterrupted run's."""
    from course_lib.training import loop as loop_module

    def cfg(out: Path) -> FinetuneConfig:
        return FinetuneConfig.from_dict({"task": "sst2", "model": str(tiny_model_dir), "glue_dir": str(keyword_glue),
                                         "output_dir": str(out), "epochs": 3, "batch_size": 16, "max_len": 32,
                                         "lr": 1e-3, "max_train_samples": 48, "max_eval_samples": 32})

    class Stopped(Exception):
        """The process ending at this point, as a kill would end it."""

    real = getattr(loop_module.TrainingLoop, stop_after)

    def then_stop(self, *args, **kwargs):
        real(self, *args, **kwargs)
        raise Stopped

    finetune(cfg(tmp_path / "whole"))
    monkeypatch.setattr(loop_module.TrainingLoop, stop_after, then_stop)
    out = tmp_path / "stopped"
    with pytest.raises(Stopped):
        finetune(cfg(out))
    state = torch.load(out / "checkpoint.pt", weights_only=True)["state"]
    assert state["global_step"] == 3 and [entry["epoch"] for entry in state["history"]] == [1]  # epoch 1's end
    assert (out / "metrics.json").exists() == (stop_after == "write_metrics")
    monkeypatch.setattr(loop_module.TrainingLoop, stop_after, real)
    resumed = finetune(cfg(out))
    assert [entry["epoch"] for entry in resumed["history"]] == [1, 2, 3]
    assert numbers(out) == numbers(tmp_path / "whole")
