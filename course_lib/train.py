"""GLUE fine-tuning on accelerate: the loop every method builds on.

The recipe is BERT's (Devlin et al. 2019, App. A.3): AdamW with no weight decay on biases and LayerNorm,
linear warmup then linear decay, gradient clipping. The run is a pure function of its config and seed:
batch order comes from `glue.epoch_batches(seed, epoch)` and the dropout RNG is checkpointed, so a run
killed at any step and started again with the same command ends with the same numbers.

Output directory, every file written atomically: `checkpoint.pt` (model, optimiser, schedule, RNG, position in
the data) while the run is going, `metrics.json` (config, per-epoch history, final dev metrics), and at the
end `model.safetensors` (the trained task model; the checkpoint is then removed unless keep_checkpoint).
"""
from __future__ import annotations

import json
import math
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch
from accelerate import Accelerator
from safetensors.torch import save as safetensors_save

from . import glue, ssa, ssaf
from .allocator import keep_freed_memory
from .config import FinetuneConfig
from .errors import RunFailed, UsageError
from .asa import ASAClassifier
from .heads import SequenceClassifier
from .ssa import SSAClassifier
from .metrics import compute_metrics, degenerate_predictions
from .repro import (atomic_write, check_writable_dir, progress, remove_stale_temporaries, restore_training_state,
                    save_torch, seed_everything, training_state, write_json)
from .weights import check_runnable, load_pretrained

CHECKPOINT, METRICS, WEIGHTS = "checkpoint.pt", "metrics.json", "model.safetensors"


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Decay matrices only: biases and LayerNorm parameters (all 1-D) are left alone, as in BERT."""
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def linear_warmup_decay(optimizer, warmup_steps: int, total_steps: int):
    """lr factor rises linearly 0 → 1 over warmup, then falls linearly to 0 at the last step."""
    def factor(step: int) -> float:
        if step < warmup_steps:
            return step / max(1, warmup_steps)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def _to_device(batch: dict, device) -> dict:
    return {k: v.to(device) for k, v in batch.items()}


@torch.no_grad()
def predict(model: SequenceClassifier, features: list[dict], batch_size: int, accelerator: Accelerator,
            pad_token_id: int = 0) -> torch.Tensor:
    """Class ids (or regression values) for every feature, in order; batches are shared across processes.

    Batches hold similar lengths (longest first), so little compute goes to padding: SSA's probing, which runs
    this over the training set every epoch, takes about half the time it does on batches in file order.
    """
    model.eval()
    batches = glue.epoch_batches([len(f["input_ids"]) for f in features], batch_size, seed=0, epoch=0,
                                 shuffle=False, bucket=True)
    mine = batches[accelerator.process_index::accelerator.num_processes]
    out = []
    for rows in progress(mine, desc="eval", leave=False):
        batch = _to_device(glue.collate([features[i] for i in rows], pad_token_id), accelerator.device)
        logits = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).logits
        preds = logits.squeeze(-1) if logits.shape[-1] == 1 else logits.argmax(-1)
        out += list(zip(rows, preds.float().cpu().tolist()))
    if accelerator.num_processes > 1:
        out = [pair for part in accelerator.gather_object([out]) for pair in part]
    preds = torch.empty(len(features))
    for i, p in out:
        preds[i] = p
    return preds


def evaluate(model, task: glue.GlueTask, dev_sets: dict[str, list[dict]], batch_size: int,
             accelerator: Accelerator, pad_token_id: int = 0,
             degenerate: list[str] | None = None) -> dict[str, dict[str, float]]:
    """Metrics per dev split, named as GLUE names them (accuracy, f1, matthews_correlation, ...).

    A split whose predictions are all one class (or constant) scores that class's share, which reads like a
    result; it gets a warning line in the log and, when `degenerate` is given, a line appended to it.
    """
    results = {}
    for split, features in dev_sets.items():
        preds = predict(model, features, batch_size, accelerator, pad_token_id)
        labels = [f["label"] for f in features]
        if not task.is_regression:
            preds = preds.long()
        results[split] = compute_metrics(task.metrics, preds.numpy(), labels)
        if (problem := degenerate_predictions(preds.numpy(), labels, task.label_names)) is not None:
            if accelerator.is_main_process:
                print(f"warning: {task.name} {split}: {problem}", file=sys.stderr, flush=True)
            if degenerate is not None:
                degenerate.append(f"{task.name} {split}: {problem}")
    return results


def dev_entry(model, task: glue.GlueTask, dev_sets: dict[str, list[dict]], batch_size: int,
              accelerator: Accelerator, pad_token_id: int = 0) -> dict:
    """The dev part of an epoch's history entry, for finetune and multitask alike: `evaluate`'s metrics per
    split, plus `warnings` (a line per degenerate split) only when there are some."""
    degenerate: list[str] = []
    metrics = evaluate(model, task, dev_sets, batch_size, accelerator, pad_token_id, degenerate)
    return {**metrics, "warnings": degenerate} if degenerate else metrics


def encoder_overrides(cfg: FinetuneConfig) -> dict:
    """How a method changes the pretrained encoder's config (attention normaliser, ...)."""
    if cfg.method == "ssaf":
        return ssaf.encoder_overrides(cfg.sparsegen_lambda)
    return {}


def build_classifier(cfg: FinetuneConfig, encoder, num_labels: int, tokenizer) -> SequenceClassifier:
    """The task model for the method: the plain head, or one whose training objective the method changes."""
    if cfg.method in ("ssa-co", "ssa-hybrid"):
        return SSAClassifier(encoder, num_labels, cfg.classifier_dropout, _special_ids(tokenizer), cfg.max_len,
                             hybrid=cfg.method == "ssa-hybrid", ssa_target_weight=cfg.ssa_target_weight,
                             ssa_cls_weight=cfg.ssa_cls_weight, ssa_threshold=cfg.ssa_threshold,
                             ssa_share_weight=cfg.ssa_share_weight)
    if cfg.method in ("asa", "bernoulli-mask"):
        return ASAClassifier(encoder, num_labels, cfg.classifier_dropout, mode=cfg.method.split("-")[0],
                             asa_tau=cfg.asa_tau, asa_noise=cfg.asa_noise, bernoulli_p=cfg.bernoulli_p)
    return SequenceClassifier(encoder, num_labels, cfg.classifier_dropout)


def _special_ids(tokenizer) -> list[int]:
    return [tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id]


def epoch_features(cfg: FinetuneConfig, epoch: int, train: list[dict], model, task, tokenizer,
                   accelerator: Accelerator, out: Path) -> tuple[list[dict], dict]:
    """The training set of one epoch. SSA relabels it by probing the current model, BERT-mask swaps in masked
    copies; both are cached in the output folder, so a run resumed mid-epoch trains on the same set."""
    if cfg.method not in ("ssa-co", "ssa-hybrid", "bert-mask"):
        return train, {}
    cache = out / f"epoch{epoch + 1}_train.pt"
    if not cache.exists():
        started = time.perf_counter()
        special, mask_id = set(_special_ids(tokenizer)), tokenizer.mask_token_id
        if cfg.method == "bert-mask":
            features, stats = ssa.bert_mask_epoch_features(train, epoch, cfg.seed, special, mask_id)
        else:
            def probe(feats):
                with torch.autocast(accelerator.device.type, torch.bfloat16) if cfg.ssa_probe_bf16 else nullcontext():
                    preds = predict(model, feats, cfg.eval_batch_size, accelerator, tokenizer.pad_token_id).tolist()
                return preds if task.is_regression else [round(p) for p in preds]
            features, stats = ssa.ssa_epoch_features(train, probe, epoch, cfg.seed, special, mask_id,
                                                     task.is_regression, cfg.ssa_label_mode,
                                                     first_epoch_loss=cfg.ssa_first_epoch_loss)
        stats["label_seconds"] = round(time.perf_counter() - started, 2)
        if accelerator.is_main_process:
            save_torch(cache, {"features": features, "stats": stats})
        accelerator.wait_for_everyone()
    saved = torch.load(cache, weights_only=False)
    return saved["features"], saved["stats"]


def _batch_loss(model, features: list[dict], pad_id: int, accelerator: Accelerator):
    """The batch-mean training loss, with the batch's rows split across processes; returns (loss, stats).

    Each process returns its rows' mean loss * n_p * P / N; averaging gradients across the P processes,
    as DDP does, then gives exactly the single-process gradient of the batch mean, however the rows fall.
    A process left without rows (a last batch smaller than P) runs one row with weight 0 so DDP can sync.
    """
    P, N = accelerator.num_processes, len(features)
    mine = features[accelerator.process_index::P]
    weight = len(mine) * P / N
    if not mine:
        mine, weight = features[:1], 0.0
    batch = _to_device(glue.collate(mine, pad_id), accelerator.device)
    extra = {"token_labels": batch["token_labels"]} if "token_labels" in batch else {}
    out = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], labels=batch["labels"], **extra)
    return out.loss * weight, out.stats


def guarded_step(loss: torch.Tensor, value: float, accelerator: Accelerator, model, optimizer,
                 max_grad_norm: float, on_nonfinite: str, where: str, ckpt_path: Path, hint: str) -> bool:
    """Backward, clip and step when the loss `value` is finite; return False for a skipped step.

    A NaN or infinite loss either skips the step (on_nonfinite="skip") or stops the run with RunFailed,
    naming where it happened; the last good checkpoint on disk is left untouched.
    """
    if math.isfinite(value):
        accelerator.backward(loss)
        if max_grad_norm > 0:
            accelerator.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return True
    if on_nonfinite == "skip":
        optimizer.zero_grad(set_to_none=True)
        return False
    kept = f"the last good checkpoint is kept in {ckpt_path}" if ckpt_path.exists() else "no checkpoint was written yet"
    raise RunFailed(f"loss is {value} at {where}; {kept} ({hint}, or --on-nonfinite-loss skip)")


def _accumulate(totals: dict, stats: dict) -> None:
    """Add a step's method statistics (numbers or per-layer lists) to the epoch's running sums."""
    for key, value in stats.items():
        totals[key] = (torch.tensor(totals[key], dtype=torch.float64) + torch.tensor(value, dtype=torch.float64)
                       ).tolist() if key in totals else value


def check_same_run(saved: dict, cfg, path: Path) -> None:
    """Refuse to resume or reuse the output of a different configuration (any config dataclass).

    A field missing from an older file counts as its default, so adding an option never orphans old runs.
    """
    mine, defaults = cfg.to_dict(), type(cfg)().to_dict()
    diff = sorted(k for k in mine if k != "output_dir" and saved.get(k, defaults[k]) != mine[k])
    if diff:
        k = diff[0]
        raise UsageError(f"{path} holds a different run's checkpoint ({k}={saved.get(k, defaults[k])!r}, this run "
                         f"has {k}={mine[k]!r}); use another --output-dir or delete it")


def resume(ckpt_path: Path, cfg, out: Path, model, optimizer, scheduler) -> dict | None:
    """Load the run's last checkpoint, if there is one, into the model, optimiser, schedule and RNGs; return it
    (None: a fresh start). A checkpoint of another configuration is refused (`check_same_run`)."""
    if not ckpt_path.exists():
        return None
    ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=False)
    check_same_run(ckpt["config"], cfg, out)
    restore_training_state(ckpt, model, optimizer, scheduler)
    return ckpt


def _finished(out: Path, cfg: FinetuneConfig) -> dict | None:
    """The metrics of a run that already completed in `out` with this config, else None."""
    path = out / METRICS
    if not path.exists():
        return None
    result = json.loads(path.read_text())
    check_same_run(result["config"], cfg, out)
    return result if result.get("status") == "complete" else None


def task_examples(cfg: FinetuneConfig, task: glue.GlueTask) -> tuple[list, dict[str, list]]:
    """(training examples, dev examples per split), each capped by the config's debug limits."""
    train = glue.subsample(glue.load_split(task, "train", cfg.glue_dir), cfg.max_train_samples, cfg.seed)
    return train, {s: glue.subsample(glue.load_split(task, s, cfg.glue_dir), cfg.max_eval_samples, cfg.seed)
                   for s in task.dev_splits}


def finetune(cfg: FinetuneConfig) -> dict:
    """Fine-tune, evaluate each epoch, checkpoint, resume; return the metrics.json content."""
    out = Path(cfg.output_dir)
    done = _finished(out, cfg)
    if done is not None:
        return done  # the same command after completion costs nothing
    check_runnable(cfg)  # fp16 without a GPU, sequences longer than the model's positions
    check_writable_dir(out)  # here, not at the first checkpoint an epoch later
    keep_freed_memory()
    accelerator = Accelerator(cpu=not torch.cuda.is_available(), mixed_precision=cfg.mixed_precision)
    seed_everything(cfg.seed)
    task = glue.get_task(cfg.task)
    train_examples, dev_examples = task_examples(cfg, task)

    encoder, tokenizer = load_pretrained(cfg.model, **encoder_overrides(cfg))
    model = build_classifier(cfg, encoder, task.num_labels, tokenizer)
    pad_id = tokenizer.pad_token_id
    train = glue.encode(train_examples, tokenizer, cfg.max_len)
    dev = {s: glue.encode(ex, tokenizer, cfg.max_len) for s, ex in dev_examples.items()}

    steps_per_epoch = math.ceil(len(train) / cfg.batch_size)
    total_steps = steps_per_epoch * cfg.epochs
    optimizer = torch.optim.AdamW(param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=(0.9, 0.999), eps=1e-8,
                                  fused=True)  # one kernel for all parameters: ~5x faster than the loop on CPU
    scheduler = linear_warmup_decay(optimizer, round(cfg.warmup_ratio * total_steps), total_steps)

    state = {"epoch": 0, "step_in_epoch": 0, "global_step": 0, "history": [], "train_seconds": 0.0}
    ckpt_path = out / CHECKPOINT
    if accelerator.is_main_process:  # the folder exists: check_writable_dir made it
        remove_stale_temporaries(out)
    if (ckpt := resume(ckpt_path, cfg, out, model, optimizer, scheduler)) is not None:
        state = ckpt["state"]
        accelerator.print(f"resuming {out} at epoch {state['epoch'] + 1}, step {state['step_in_epoch']}")

    model, optimizer = accelerator.prepare(model, optimizer)
    base = accelerator.unwrap_model(model)

    def save_checkpoint() -> None:
        if accelerator.is_main_process:
            save_torch(ckpt_path, {"config": cfg.to_dict(), "state": state,
                                   **training_state(base, optimizer, scheduler)})
        accelerator.wait_for_everyone()

    def write_metrics(status: str) -> dict:
        result = {"config": cfg.to_dict(), "task": task.name, "status": status,
                  "history": state["history"], "train_steps": state["global_step"],
                  "skipped_steps": state.get("skipped_steps", 0),
                  "train_examples": len(train), "timing": {"train_seconds": round(state["train_seconds"], 1)}}
        if state["history"]:
            result.update({k: v for k, v in state["history"][-1].items() if k.startswith("dev") or k == "warnings"})
        result.setdefault("warnings", [])  # the last epoch's; [] when its predictions vary as they should
        if accelerator.is_main_process:
            write_json(out / METRICS, result)
        return result

    while state["epoch"] < cfg.epochs:
        epoch = state["epoch"]
        epoch_train, epoch_stats = epoch_features(cfg, epoch, train, model, task, tokenizer, accelerator, out)
        batches = glue.epoch_batches([len(f["input_ids"]) for f in epoch_train], cfg.batch_size, cfg.seed, epoch,
                                     shuffle=True, bucket=cfg.bucket_by_length)
        model.train()
        started = time.perf_counter()
        bar = progress(total=steps_per_epoch, initial=state["step_in_epoch"], desc=f"epoch {epoch + 1}/{cfg.epochs}")
        for rows in batches[state["step_in_epoch"]:]:
            loss, stats = _batch_loss(model, [epoch_train[i] for i in rows], pad_id, accelerator)
            batch_loss = accelerator.reduce(loss.detach().clone(), reduction="mean").item()  # same on every process
            if guarded_step(loss, batch_loss, accelerator, model, optimizer, cfg.max_grad_norm,
                            cfg.on_nonfinite_loss, f"epoch {epoch + 1}, step {state['step_in_epoch'] + 1}",
                            ckpt_path, "try a lower --lr"):
                state["epoch_loss"] = state.get("epoch_loss", 0.0) + batch_loss
                _accumulate(state.setdefault("epoch_stats", {}), stats)
            else:
                state["skipped_steps"] = state.get("skipped_steps", 0) + 1
            scheduler.step()
            state["step_in_epoch"] += 1
            state["global_step"] += 1
            bar.update()
            bar.set_postfix(loss=f"{batch_loss:.4f}")
            if cfg.save_every and state["global_step"] % cfg.save_every == 0 \
                    and state["step_in_epoch"] < steps_per_epoch:
                state["train_seconds"] += time.perf_counter() - started
                started = time.perf_counter()
                save_checkpoint()
        bar.close()
        state["train_seconds"] += time.perf_counter() - started
        scores = dev_entry(model, task, dev, cfg.eval_batch_size, accelerator, pad_id)
        entry = {"epoch": epoch + 1, "train_loss": state.pop("epoch_loss", 0.0) / steps_per_epoch, **epoch_stats}
        entry.update({k: (torch.tensor(v, dtype=torch.float64) / steps_per_epoch).tolist()
                      for k, v in state.pop("epoch_stats", {}).items()})  # e.g. ASA's masking proportion per layer
        state["history"].append({**entry, **scores})
        state.update(epoch=epoch + 1, step_in_epoch=0)
        save_checkpoint()
        write_metrics("running")
        accelerator.print(f"epoch {epoch + 1}: " + ", ".join(
            f"{s} {k} {v:.4f}" for s in task.dev_splits for k, v in scores[s].items()))
    result = write_metrics("complete")
    if accelerator.is_main_process:  # keep the trained weights; drop the optimiser state unless asked to keep it
        atomic_write(out / WEIGHTS, lambda f: f.write(safetensors_save(base.state_dict())))
        if not cfg.keep_checkpoint:
            ckpt_path.unlink(missing_ok=True)
    return result


def load_finetuned(output_dir) -> tuple[SequenceClassifier, object]:
    """(task model in eval mode, tokenizer) of a run that `finetune` completed in output_dir.

    Rebuilt from the config saved in metrics.json (model, method and its encoder overrides) and the trained
    weights in model.safetensors, so notebooks can probe a fine-tuned model's attention after training.
    """
    from safetensors.torch import load_file

    out = Path(output_dir)
    if not (out / METRICS).is_file() or not (out / WEIGHTS).is_file():
        raise UsageError(f"{out} holds no completed fine-tuning run ({METRICS} and {WEIGHTS}): run finetune "
                         f"there first")
    cfg = FinetuneConfig.from_dict(json.loads((out / METRICS).read_text())["config"])
    encoder, tokenizer = load_pretrained(cfg.model, **encoder_overrides(cfg))
    model = build_classifier(cfg, encoder, glue.get_task(cfg.task).num_labels, tokenizer)
    model.load_state_dict(load_file(out / WEIGHTS))
    return model.eval(), tokenizer
