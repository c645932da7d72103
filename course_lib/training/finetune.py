"""Fine-tuning one task: each epoch's training set (the method's), the loss and the evaluation; the task model
comes from `training.task_model`.

The task's family (`course_lib.tasks.registry`: GLUE's tasks are presets of the sentence family) reads, encodes,
batches, decodes, scores and writes; the run's method (`course_lib.methods.registry`) changes the encoder, the
task model and the epoch's training set.

The recipe is BERT's (Devlin et al. 2019, App. A.3): AdamW with no weight decay on biases and LayerNorm,
linear warmup then linear decay, gradient clipping. The run is a pure function of its config and seed:
batch order comes from `batching.epoch_batches(seed, epoch)` and the dropout RNG is checkpointed, so a run
killed at any step and started again with the same command ends with the same numbers.

The loop that runs it (optimiser, schedule, guarded steps, checkpoints, resume) is `training.loop`; the output
folder holds `checkpoint.pt` while the run goes, `metrics.json` (config, per-epoch history, final dev metrics),
and at the end `model.safetensors` (the trained task model) and `<split>_predictions.<tsv|json>` per dev split.
"""
from __future__ import annotations

import functools
import math
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch
from accelerate import Accelerator
from safetensors.torch import save as safetensors_save

from course_lib.methods.registry import EpochContext
from course_lib.model.heads import SequenceClassifier
from course_lib.model.weights import check_runnable
from course_lib.readers import sources
from course_lib.model.model_folder import load_tokenizer
from course_lib.runtime.compiled import step_collate
from course_lib.training.export import export_if_asked
from course_lib.runtime.repro import WEIGHTS
from course_lib.runtime.repro import atomic_write, load_torch, progress, save_torch, seed_everything
from course_lib.runtime.run_folder import finished_run
from course_lib.tasks import batching, sentence
from course_lib.tasks.metrics import shown
from course_lib.tasks.registry import TaskFamily
from course_lib.training.config import FinetuneConfig
from course_lib.training.loop import Job, TrainingLoop, add_stats, data_ready_line, open_run, present_stats
from course_lib.training.run import Run, resolve
from course_lib.training.task_model import build_classifier, load_encoder


def predictions_file(split: str, family) -> str:
    """The file a finished run writes a dev split's predictions to, in the task family's layout."""
    return f"{split}_predictions.{family.predictions_suffix}"


@torch.no_grad()
def predict(model: SequenceClassifier, features: list[dict], batch_size: int, accelerator: Accelerator,
            pad_token_id: int, task, family: TaskFamily):
    """The task family's predictions for the features (sentence: class ids or scores, one per feature, in
    order; span QA: an answer per question); batches are shared across processes, and the family decodes
    the gathered outputs.

    Batches hold similar lengths (longest first), so little compute goes to padding: SSA's probing, which runs
    this over the training set every epoch, takes about half the time it does on batches in file order.
    """
    return family.decode(task, output_rows(model, features, batch_size, accelerator, pad_token_id, family), features)


@torch.no_grad()
def output_rows(model, features: list[dict], batch_size: int, accelerator: Accelerator, pad_token_id: int,
                family: TaskFamily, desc: str = "eval") -> list[torch.Tensor]:
    """The model's output row (its logits) for each feature, in the features' order, in eval mode."""
    model.eval()
    batches = batching.epoch_batches([family.length(f) for f in features], batch_size, seed=0, epoch=0,
                                     shuffle=False, bucket=True)
    mine = batches[accelerator.process_index::accelerator.num_processes]
    out = []
    for rows in progress(mine, desc=desc, leave=False):
        batch = batching.to_device(family.collate([features[i] for i in rows], pad_token_id), accelerator.device)
        logits = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).logits
        out += list(zip(rows, logits.float().cpu()))  # one output row per feature
    if accelerator.num_processes > 1:
        out = [pair for part in accelerator.gather_object([out]) for pair in part]
    ordered = [None] * len(features)
    for i, row in out:
        ordered[i] = row
    return ordered


def evaluate(model, task, family: TaskFamily, dev_sets: dict[str, list[dict]], batch_size: int,
             accelerator: Accelerator,
             pad_token_id: int = 0, degenerate: list[str] | None = None,
             predictions: dict | None = None) -> dict[str, dict[str, float]]:
    """Metrics per dev split, as the task's family scores them (GLUE's names: accuracy, f1, ...).

    Degenerate predictions (all one class, or constant) score that class's share, which reads like a result;
    they get a warning line in the log and, when `degenerate` is given, a line appended to it. When
    `predictions` is given, each split's (predictions, metrics) are stored in it.
    """
    results = {}
    for split, features in dev_sets.items():
        preds = predict(model, features, batch_size, accelerator, pad_token_id, task, family)
        results[split], problem = family.score(task, preds, features)
        if predictions is not None:
            predictions[split] = (preds, results[split])
        if problem is not None:
            if accelerator.is_main_process:
                print(f"warning: {task.name} {split}: {problem}", file=sys.stderr, flush=True)
            if degenerate is not None:
                degenerate.append(f"{task.name} {split}: {problem}")
    return results


def dev_entry(model, task, family: TaskFamily, dev_sets: dict[str, list[dict]], batch_size: int,
              accelerator: Accelerator,
              pad_token_id: int = 0, predictions: dict | None = None) -> dict:
    """The dev part of an epoch's history entry, for finetune and multitask alike: `evaluate`'s metrics per
    split, plus `warnings` (a line per degenerate split) only when there are some."""
    degenerate: list[str] = []
    metrics = evaluate(model, task, family, dev_sets, batch_size, accelerator, pad_token_id, degenerate, predictions)
    return {**metrics, "warnings": degenerate} if degenerate else metrics


def epoch_features(run: Run, epoch: int, train: list[dict], model, tokenizer, accelerator: Accelerator,
                   out: Path) -> tuple[list[dict], dict]:
    """The training set of one epoch: the method's `epoch_data` (SSA relabels it by probing the current model,
    BERT-mask swaps in masked copies), cached in the output folder so a run resumed mid-epoch trains on the same
    set; the encoded set itself for methods without one."""
    cfg, task, hook = run.cfg, run.task, run.method.epoch_data
    if hook is None:
        return train, {}
    cache = epoch_cache(out, epoch)
    if not cache.exists():
        started = time.perf_counter()

        def probe(feats: list[dict], bf16: bool = False) -> list:
            with torch.autocast(accelerator.device.type, torch.bfloat16) if bf16 else nullcontext():
                preds = predict(model, feats, cfg.eval_batch_size, accelerator, tokenizer.pad_token_id,
                                task, run.family).tolist()
            return preds if task.is_regression else [round(p) for p in preds]

        special = batching.special_token_ids(tokenizer)
        context = EpochContext(epoch, task.is_regression, special, tokenizer.mask_token_id, probe)
        features, stats = hook(cfg, train, context)
        stats["label_seconds"] = round(time.perf_counter() - started, 2)
        if accelerator.is_main_process:
            save_torch(cache, {"features": features, "stats": stats})
        accelerator.wait_for_everyone()
    saved = read_epoch_cache(cache)
    return saved["features"], saved["stats"]


def epoch_cache(out: Path, epoch: int) -> Path:
    """Where `epoch_features` keeps the training set of epoch `epoch` (0-based) of a run in `out`."""
    return out / f"epoch{epoch + 1}_train.pt"


def read_epoch_cache(path: Path) -> dict:
    """An epoch's cached training set ({"features", "stats"}), read without running code (`repro.load_torch`)."""
    return load_torch(path, "epoch cache", "delete it, and the run labels that epoch's training set again")


def check_epoch_caches(out: Path) -> None:
    """Read every epoch cache a folder holds before any training, so a planted or damaged one stops the run at
    its start (one line, exit 2) rather than epochs later, when that epoch begins."""
    for path in sorted(out.glob("epoch*_train.pt")):
        read_epoch_cache(path)


def batch_loss(model, features: list[dict], pad_id: int, accelerator: Accelerator, collate=sentence.collate):
    """The batch-mean training loss, with the batch's rows split across processes; returns (loss, stats).
    collate: the task family's (sentence batches by default).

    Each process returns its rows' mean loss * n_p * P / N; averaging gradients across the P processes,
    as DDP does, then gives exactly the single-process gradient of the batch mean, however the rows fall.
    A process left without rows (a last batch smaller than P) runs one row with weight 0 so DDP can sync.
    """
    P, N = accelerator.num_processes, len(features)
    mine = features[accelerator.process_index::P]
    weight = len(mine) * P / N
    if not mine:
        mine, weight = features[:1], 0.0
    batch = batching.to_device(collate(mine, pad_id), accelerator.device)
    extra = {"token_labels": batch["token_labels"]} if "token_labels" in batch else {}
    out = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], labels=batch["labels"], **extra)
    return out.loss * weight, out.stats


def task_examples(run: Run) -> tuple[list, dict[str, list]]:
    """(training examples, dev examples per split) as the task's family reads them, each capped by the
    config's debug limits."""
    cfg, task, family = run.cfg, run.task, run.family
    return split_examples(cfg, task, family, "train"), {s: split_examples(cfg, task, family, s) for s in task.dev_splits}


def encode_split(run: Run, examples, tokenizer, training: bool, files: dict | None = None):
    """A split's features as the run's family encodes them, read from the encoded-data cache when another run
    encoded the same examples the same way (`runtime.feature_cache`), else encoded and written there. `files`: the
    split's files' content (`split_features`), the key instead of the examples, which `examples()` then reads
    only when the split was not encoded before."""
    from course_lib.runtime import feature_cache  # here: a notebook's first cell loads the lesson, not the cache

    cfg, family = run.cfg, run.family
    what = {"family": family.name, "task": run.task.name, "training": training, "max_len": cfg.max_len,
            "options": cfg.task_options.to_dict(), **({"read_from": files} if files else {})}
    read = examples if files else lambda: examples
    chunks = family.encode_chunks
    return feature_cache.cached(what, [] if files else examples, tokenizer,
                                lambda: family.encode(read(), tokenizer, cfg, training),
                                chunks and (lambda: chunks(read(), tokenizer, cfg, training)))


def split_features(run: Run, split: str, tokenizer, training: bool, seconds: dict):
    """A split's features (capped by the config's debug limits), as `encode_split` gives them. A preset that
    names its split's files (GLUE's TSVs: `split_files`) is keyed on their content, so a run that finds the
    split encoded before does not read it at all; the others are read, then keyed on their examples.
    seconds["read"] adds the time spent reading."""
    from course_lib.runtime import feature_cache  # here: a notebook's first cell loads the lesson, not the cache

    cfg, task = run.cfg, run.task
    cap = sample_cap(cfg, split)

    @functools.cache
    def examples() -> list:
        started = time.perf_counter()
        read = split_examples(cfg, task, run.family, split)
        seconds["read"] += time.perf_counter() - started
        return read

    files = task.split_files(split, cfg) if hasattr(task, "split_files") else None
    if files is None:
        return encode_split(run, examples(), tokenizer, training)
    content = {"split": split, "cap": cap, "seed": cfg.seed if cap else None,
               "files": [feature_cache.file_fingerprint(path) for path in files]}
    return encode_split(run, examples, tokenizer, training, content)


def sample_cap(cfg: FinetuneConfig, split: str) -> int | None:
    """The config's debug cap on a split: max_train_samples for training, max_eval_samples for the others."""
    return cfg.max_train_samples if split == "train" else cfg.max_eval_samples


def split_examples(cfg: FinetuneConfig, task, family: TaskFamily, split: str) -> list:
    """One split as the run reads it: the family's reader, then the config's seeded cap (`sample_cap`)."""
    return batching.subsample(family.read(task, split, cfg), sample_cap(cfg, split), cfg.seed)


class FinetuneJob(Job):
    """Fine-tuning as the training loop sees it: each epoch a shuffled pass over the training set (relabelled
    first by SSA, or partly masked by BERT-mask), the method's loss per batch, the dev metrics at its end."""

    def __init__(self, run: Run, train: list[dict], dev: dict[str, list[dict]], tokenizer, out: Path):
        cfg = run.cfg
        self.run, self.cfg, self.task, self.family, self.method = run, cfg, run.task, run.family, run.method
        self.train, self.dev, self.tokenizer, self.out = train, dev, tokenizer, out
        self.segments, self.pad_id = cfg.epochs, tokenizer.pad_token_id
        self.steps_per_epoch = math.ceil(len(train) / cfg.batch_size)
        self.epoch_train, self.epoch_stats = train, {}
        self.collate = step_collate(run.family.collate, cfg.compile, cfg.max_len)  # padded under `graphs`
        self.predictions: dict[str, tuple] = {}  # the last evaluation's (predictions, metrics), per dev split

    def plan(self, epoch: int) -> list:
        loop = self.loop
        self.epoch_train, self.epoch_stats = epoch_features(self.run, epoch, self.train, loop.model, self.tokenizer,
                                                            loop.accelerator, self.out)
        length = self.family.length
        return batching.epoch_batches([length(f) for f in self.epoch_train], self.cfg.batch_size, self.cfg.seed,
                                  epoch, shuffle=True, bucket=self.cfg.bucket_by_length)

    def clipped_parameters(self, model) -> list | None:
        return self.method.clip_scope(self.cfg, model)

    def loss(self, rows):
        accelerator = self.loop.accelerator
        loss, stats = batch_loss(self.loop.model, [self.epoch_train[i] for i in rows], self.pad_id, accelerator,
                                 self.collate)
        value = accelerator.reduce(loss.detach().clone(), reduction="mean")  # the same on every process
        return loss, value, {"loss": value, "stats": stats}

    def record(self, record: dict, taken) -> None:
        state, totals = self.loop.state, self.loop.totals
        totals.add(state, ("epoch_loss",), record["loss"], taken)
        totals.count(state, ("epoch_taken",), taken)  # a skipped step (non-finite loss) is not in the mean
        add_stats(totals, state, ("epoch_stats",), ("epoch_seen",), record["stats"], taken)  # e.g. ASA's cut shares

    def end_segment(self, epoch: int, state: dict) -> None:
        scores = dev_entry(self.loop.model, self.task, self.family, self.dev, self.cfg.eval_batch_size,
                           self.loop.accelerator, self.pad_id, self.predictions)
        taken = state.pop("epoch_taken", 0)
        entry = {"epoch": epoch + 1, "train_loss": state.pop("epoch_loss", 0.0) / taken if taken else None,
                 **self.epoch_stats}
        stats = present_stats(state.pop("epoch_stats", {}), state.pop("epoch_seen", {}))
        entry.update({k: (torch.tensor(v, dtype=torch.float64) / taken).tolist()
                      for k, v in stats.items() if taken})  # e.g. ASA's masking proportion per layer
        state["history"].append({**entry, **scores})
        in_points = self.family.percent_scores
        self.loop.accelerator.print(f"epoch {epoch + 1}: " + ", ".join(
            f"{s} {k} {shown(k, v, in_points)}" for s in self.task.dev_splits for k, v in scores[s].items()))

    def summary(self, state: dict, status: str) -> dict:
        result = {"kind": "finetune", "config": self.cfg.to_dict(), "task": self.task.name, "family": self.task.family,
                  "main_metric": self.task.metrics[0], "status": status,
                  "history": state["history"], "train_steps": state["global_step"],
                  "skipped_steps": state.get("skipped_steps", 0), "train_examples": len(self.train),
                  "timing": {"train_seconds": round(state["train_seconds"], 1)}}
        if state["history"]:
            result.update({k: v for k, v in state["history"][-1].items()
                           if k in self.task.dev_splits or k == "warnings"})
        result.setdefault("warnings", [])  # the last epoch's; [] when its predictions vary as they should
        return result

    def save_final(self) -> None:
        atomic_write(self.out / WEIGHTS, lambda f: f.write(safetensors_save(self.loop.base.state_dict())))
        for split, (predictions, scores) in self.predictions.items():
            self.family.write_predictions(self.out / predictions_file(split, self.family), self.task, predictions,
                                          scores)


def finetune(cfg: FinetuneConfig) -> dict:
    """Fine-tune, evaluate each epoch, checkpoint, resume; return the metrics.json content."""
    out = Path(cfg.output_dir)
    done = finished_run(out, cfg)
    if done is not None:
        export_if_asked(cfg, out)
        return done  # the same command after completion costs nothing
    run = resolve(cfg)
    check_runnable(cfg, run.model_dir)  # fp16 without a GPU, sequences longer than the model's positions
    accelerator = open_run(cfg, out)
    check_epoch_caches(out)
    seed_everything(cfg.seed)
    if (note := sources.skipped_test_note(run.task, cfg)) is not None:
        accelerator.print(note)
    tokenizer = load_tokenizer(run.model_dir)  # the data first: a bad file stops the run before the model loads
    seconds, started = {"read": 0.0}, time.perf_counter()
    train = split_features(run, "train", tokenizer, True, seconds)
    dev = {s: split_features(run, s, tokenizer, False, seconds) for s in run.task.dev_splits}
    data_seconds = time.perf_counter() - started
    encoder, _ = load_encoder(run)
    model = build_classifier(run, encoder, tokenizer)
    job = FinetuneJob(run, train, dev, tokenizer, out)
    job.data_ready = data_ready_line(seconds["read"], data_seconds - seconds["read"],
                                     f"{len(train)} training and {sum(map(len, dev.values()))} dev examples")
    total_steps = job.steps_per_epoch * cfg.epochs
    result = TrainingLoop(cfg, out, accelerator, model, total_steps, round(cfg.warmup_ratio * total_steps)).run(job)
    export_if_asked(cfg, out)
    return result
