"""`python -m benchmarks speed|methods|sparsemax`: measurements taken side by side in one process.

- speed: our encoder against Hugging Face's BertModel (sdpa and eager), same weights and inputs; then the span-QA
  model against BertForQuestionAnswering at length 384 and the tagging model against BertForTokenClassification
  at 128 (`head_speed`).
- methods: the training step of each method against vanilla fine-tuning (AG: against plain MLM pre-training),
  SSA's per-epoch label generation as a share of the epoch's training, and saved activations per step.
- sparsemax: our sparsemax (sparsegen-lin at lambda 0) against entmax's, forward + backward.

Every benchmark runs its contestants in one process with interleaved repeats, the order rotated each round, so
drift in a shared machine's speed hits every contestant alike; ratios are taken within each round and summarised
by their median and interquartile range. Speed targets are checked here, by printed ratios, never by timed tests.
"""
from __future__ import annotations

import json
import math
import statistics
import tempfile
from pathlib import Path
from typing import Callable

import torch

from benchmarks.head_speed import format_head_speed, span_speed, tagging_speed
from course_lib.notebook.timing import interleaved, machine_load, ratio_summary, timed
from course_lib.model.weights import load_pretrained
from course_lib.model.model_folder import resolve_model_dir
from course_lib.fast import optimize
from course_lib.fast.allocator import keep_freed_memory
from course_lib.runtime.repro import progress


def matmul_gflops(n: int = 3072, repeats: int = 4) -> float:
    """The machine's practical fp32 limit: a large square matmul, best of `repeats`.

    A shared machine's speed drifts, so `speed` measures this before every case and keeps the best.
    """
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = min(timed(lambda: a @ b) for _ in range(repeats))
    return 2 * n**3 / best / 1e9


def encoder_flops(cfg, batch: int, seq: int, training: bool) -> float:
    """Matmul FLOPs of one pass: per layer, QKV/output/FFN projections plus the two attention products.

    Backward costs twice the forward, so a training step is 3x. Embeddings, norms and GELU are not counted.
    """
    d, ff, layers, tokens = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers, batch * seq
    per_layer = 2 * tokens * (4 * d * d + 2 * d * ff) + 2 * 2 * batch * seq * seq * d
    forward = layers * per_layer + 2 * batch * d * d  # + pooler
    return forward * (3 if training else 1)


def _contestants(model_name, compiled: bool = False):
    """The encoders timed; `compiled` adds the plain reading path under torch.compile (the `compile default` run
    option, which leaves the fast kernels out), to set against the same path eager (`plain_cls`)."""
    import transformers

    transformers.utils.logging.disable_progress_bar()
    ours = optimize(load_pretrained(model_name)[0])
    plain, _ = load_pretrained(model_name)  # the reading path, no fast kernels
    folder = str(resolve_model_dir(model_name))
    hf = {impl: transformers.BertModel.from_pretrained(folder, attn_implementation=impl)
          for impl in ("sdpa", "eager")}
    runs = {"ours": lambda ids, mask: ours(ids, mask).pooler_output,
            "ours_cls": lambda ids, mask: ours(ids, mask, cls_only=True).pooler_output,
            "plain_cls": lambda ids, mask: plain(ids, mask, cls_only=True).pooler_output,
            "hf_sdpa": lambda ids, mask: hf["sdpa"](input_ids=ids, attention_mask=mask).pooler_output,
            "hf_eager": lambda ids, mask: hf["eager"](input_ids=ids, attention_mask=mask).pooler_output}
    modules = [ours, plain, *hf.values()]
    if compiled:
        fused, _ = load_pretrained(model_name)
        fused.compile()
        runs["compiled_cls"] = lambda ids, mask: fused(ids, mask, cls_only=True).pooler_output
        modules.append(fused)
    return runs, modules, ours.config


def speed(model_name=None, batch_size: int = 32, seq_lens=(64, 128), repeats: int = 10, warmup: int = 2,
          compiled: bool = False) -> dict:
    """Training step (forward + backward, dropout on) and inference (eval, no grad) for each contestant."""
    keep_freed_memory(batch_size, max(seq_lens))  # as the command line would for this batch; every contestant alike
    torch.manual_seed(0)
    runs, modules, cfg = _contestants(model_name, compiled)
    peak = matmul_gflops()
    results = {"peak_matmul_gflops": 0.0, "batch_size": batch_size, "threads": torch.get_num_threads(),
               "cases": []}
    names = list(runs)
    for seq in seq_lens:
        ids = torch.randint(1000, cfg.vocab_size, (batch_size, seq))
        mask = torch.ones_like(ids)
        for module in modules:
            module.eval()
        with torch.no_grad():  # identical outputs first: a fast wrong answer is no result
            outs = {n: f(ids, mask) for n, f in runs.items()}
        max_diff = max((outs[n] - outs["ours"]).abs().max().item() for n in names)
        for mode in ("train", "inference"):
            for module in modules:
                module.train(mode == "train")

            def step(fn):
                if mode == "train":
                    for module in modules:
                        module.zero_grad(set_to_none=True)
                    fn(ids, mask).sum().backward()
                else:
                    with torch.inference_mode():
                        fn(ids, mask)

            peak = max(peak, matmul_gflops())
            times = {n: [] for n in names}
            for r in progress(range(warmup + repeats), desc=f"L={seq} {mode}", leave=False):
                for n in names[r % len(names):] + names[:r % len(names)]:
                    t = timed(lambda: step(runs[n]))
                    if r >= warmup:
                        times[n].append(t)
            med = {n: statistics.median(t) for n, t in times.items()}
            flops = encoder_flops(cfg, batch_size, seq, mode == "train")
            results["cases"].append({
                "seq_len": seq, "mode": mode, "max_abs_diff_vs_ours": max_diff,
                "median_s": {n: round(m, 4) for n, m in med.items()},
                "iqr_s": {n: round(statistics.quantiles(t, n=4)[2] - statistics.quantiles(t, n=4)[0], 4)
                          for n, t in times.items()},
                "speedup_vs": {n: round(med[n] / med["ours"], 3) for n in names if n != "ours"},
                "cls_speedup_vs": {n: round(med[n] / med["ours_cls"], 3) for n in names if n.startswith("hf")},
                "plain_cls_speedup_vs": {n: round(med[n] / med["plain_cls"], 3) for n in names if n.startswith("hf")},
                **({"compiled_vs_plain_cls": ratio_summary(times["plain_cls"], times["compiled_cls"])}
                   if "compiled_cls" in med else {}),
                "ours_gflops": round(flops / med["ours"] / 1e9, 1),
                "ours_fraction_of_peak": round(flops / med["ours"] / 1e9 / peak, 3),
            })
    results["peak_matmul_gflops"] = round(peak, 1)
    for case in results["cases"]:  # fractions against the best rate seen in the whole run
        case["ours_fraction_of_peak"] = round(case["ours_gflops"] / peak, 3)
    return results


def format_speed(results: dict) -> str:
    lines = [f"dense fp32 matmul on this machine: {results['peak_matmul_gflops']} GFLOP/s "
             f"({results['threads']} threads); batch {results['batch_size']}",
             "ours: every position of every layer, as HF; [CLS]: the last layer computes [CLS] alone "
             "(the encoder's cls_only, what the classification heads use); all give HF's pooler_output. "
             "ours = with fast kernels (course_lib.fast.optimize), plain = the plain PyTorch reading path",
             "| L | mode | ours s | ours [CLS] s | plain [CLS] s | HF sdpa s | HF eager s | ours vs sdpa "
             "| ours [CLS] vs sdpa | plain [CLS] vs sdpa | ours GFLOP/s | of peak |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in results["cases"]:
        m, s, k, p = c["median_s"], c["speedup_vs"], c["cls_speedup_vs"], c["plain_cls_speedup_vs"]
        lines.append(f"| {c['seq_len']} | {c['mode']} | {m['ours']} | {m['ours_cls']} | {m['plain_cls']} | "
                     f"{m['hf_sdpa']} | {m['hf_eager']} | {s['hf_sdpa']}x | {k['hf_sdpa']}x | {p['hf_sdpa']}x | "
                     f"{c['ours_gflops']} | {c['ours_fraction_of_peak']:.0%} |")
    lines.append(f"largest |pooler_output - ours| over the contestants: "
                 f"{max(c['max_abs_diff_vs_ours'] for c in results['cases']):.1e}")
    lines += [f"torch.compile (default mode) of the plain [CLS] path vs eager, L={c['seq_len']} {c['mode']}: "
              f"{c['compiled_vs_plain_cls']['median']}x (IQR {c['compiled_vs_plain_cls']['iqr'][0]}-"
              f"{c['compiled_vs_plain_cls']['iqr'][1]}; above 1 the compiled one is faster)"
              for c in results["cases"] if "compiled_vs_plain_cls" in c]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# Shared by methods and sparsemax


# ----------------------------------------------------------------------------------------------
# bench methods: each method's training step against its baseline's


FINETUNE_METHODS = ("vanilla", "ssaf", "asa", "bernoulli-mask", "ssa-co", "ssa-hybrid")
STEP_TARGETS = {"ssaf": 1.5, "asa": 2.2, "ag": 1.15}  # at most this many baseline steps (issue 7; ASA paper: ~2)
SSA_LABEL_TARGET = 0.25  # SSA's label generation: at most this share of its epoch's training time


def saved_activation_bytes(loss_fn: Callable[[], object], module: torch.nn.Module) -> int:
    """Bytes of the distinct tensor storages autograd saves for the backward while `loss_fn` runs its forward.

    That is the activation memory a training step holds when its forward ends, the bulk of its peak beyond the
    weights, gradients and optimiser state (transient buffers inside single ops are not counted). It is exact
    and the same on every machine, unlike the resident-set size of a process whose allocator keeps freed
    memory. Parameters saved for the backward are not counted; a storage shared by several saved views counts
    once.
    """
    weights = {p.untyped_storage().data_ptr() for p in module.parameters()}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in weights:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss_fn()
    return sum(saved.values())


def text_lines(glue_dir: str | None = None) -> tuple[list[str], str]:
    """Real-ish sentences: SST-2's training set from glue_dir, $GLUE_DIR or data/glue, else pretrain's generated
    corpus."""
    from course_lib.readers import local_data
    from course_lib.tasks import glue
    from course_lib.training.mlm_data import generated_corpus

    glue_dir = local_data.data_folder("GLUE_DIR", glue_dir)
    if glue_dir is None:
        return generated_corpus(), "generated corpus (course_lib.training.mlm_data.generated_corpus)"
    return [ex.texts[0] for ex in glue.load_split("sst2", "train", glue_dir)], f"SST-2 train ({glue_dir})"


def fixed_length_features(lines: list[str], tokenizer, batch_size: int, seq_len: int, seed: int = 0) -> list[dict]:
    """`batch_size` features of exactly `seq_len` tokens: [CLS], a window of the tokenised text, [SEP].

    No padding, so every method pays for the full L x L attention; labels are random classes (0 or 1).
    """
    import random

    width = seq_len - 2
    stream = [t for ids in tokenizer(lines, add_special_tokens=False)["input_ids"] for t in ids]
    stream *= math.ceil(batch_size * width / max(1, len(stream)))
    rng = random.Random(seed)
    return [{"input_ids": [tokenizer.cls_token_id, *stream[b * width:(b + 1) * width], tokenizer.sep_token_id],
             "token_type_ids": [0] * seq_len, "label": rng.randint(0, 1)} for b in range(batch_size)]


def _finetune_step(model, optimizer, features: list[dict], pad_id: int, accelerator, max_grad_norm: float) -> None:
    """One step of `finetune.finetune`'s loop: the method's loss on the batch, backward, clip, AdamW step."""
    from course_lib.training.loop import guarded_step
    from course_lib.training.finetune import batch_loss

    loss, _ = batch_loss(model, features, pad_id, accelerator)
    guarded_step(loss, loss.detach(), accelerator, model, optimizer, max_grad_norm)


def _batch_loss_only(model, features: list[dict], pad_id: int, accelerator) -> torch.Tensor:
    """The forward half of `_finetune_step`: the method's loss, for `saved_activation_bytes`."""
    from course_lib.training.finetune import batch_loss

    return batch_loss(model, features, pad_id, accelerator)[0]


def _pretrain_step(model, optimizer, batch: tuple, guidance, ag_alpha: float, accelerator,
                   max_grad_norm: float) -> torch.Tensor:
    """One step of `pretrain.pretrain`'s loop: MLM loss, plus ag_alpha · L_AG when guidance is given.

    With optimizer None only the loss is computed (the forward half, for `saved_activation_bytes`).
    """
    from course_lib.training.loop import guarded_step

    inputs, attention_mask, labels = batch
    output = model(inputs, attention_mask, labels, output_attentions=guidance is not None)
    loss = output.loss
    if guidance is not None:
        loss = loss + ag_alpha * guidance.loss(output.attentions, inputs, attention_mask)
    if optimizer is not None:
        guarded_step(loss, loss.detach(), accelerator, model, optimizer, max_grad_norm)
    return loss


def methods(model_name=None, batch_size: int = 32, seq_len: int = 64, repeats: int = 10, warmup: int = 1,
            epoch_examples: int = 512, ssa_epochs=(1, 4), epoch_repeats: int = 3, glue_dir: str | None = None,
            pretrain_config=None, fast_kernels: bool = True) -> dict:
    """Training-step time of every method relative to its baseline, built and stepped as the training loops do.

    Fine-tuning methods: `finetune.build_classifier` on the pretrained encoder, fast kernels swapped in unless
    `fast_kernels` is False (`load_pretrained` with the
    method's overrides), a fused AdamW over `loop.param_groups`, and each step is `finetune.batch_loss` plus
    `loop.guarded_step` on one batch of `seq_len` real tokens per row. The learning rate is 0, as on the
    first step of the real warmup schedule, so the weights stay put and every round times the same work.
    AG is a pre-training method: the MLM + AG step against the plain MLM step of `pretrain.pretrain`, on one
    small model (`PretrainConfig`'s defaults, blocks packed by `mlm_data.pack_blocks`, masks by `mask_tokens`).

    SSA's label generation goes through `finetune.epoch_features` (probes by `finetune.predict`, labels by
    `ssa.ssa_epoch_features`, the cache written and read back) for an epoch of `epoch_examples` sentences at
    each 0-based epoch of `ssa_epochs` (1: the first probed epoch, a share of 0.2 labelled copies; 4: the
    largest share, 0.8), against the training of that epoch's set by the same loop, with fp32 probes and
    with bf16 ones (`ssa_probe_bf16`). The gold labels are the model's own predictions: a model that fits its
    training set, as a fine-tuned one nearly does, so every example is probed.
    """
    from accelerate import Accelerator

    from course_lib.tasks import batching
    from course_lib.training.config import PretrainConfig

    load_before = machine_load()
    keep_freed_memory(batch_size, seq_len)  # as the command line does for finetune and pretrain at this batch
    accelerator = Accelerator(cpu=True)
    lines, source = text_lines(glue_dir)
    lines = batching.subsample(lines, 4 * epoch_examples + 64 * batch_size, seed=0)
    steps, saved, contestants, tokenizer = _finetune_contestants(model_name, lines, batch_size, seq_len, accelerator,
                                                                 fast_kernels)
    pcfg = pretrain_config or PretrainConfig(method="ag", max_len=seq_len, batch_size=batch_size,
                                             fast_kernels=fast_kernels)  # AG's options: its scale too
    tokens = _pretrain_contestants(pcfg, lines, tokenizer, accelerator, steps, saved)
    rows = _method_rows(interleaved(steps, repeats, warmup, desc="method steps"), saved)

    cfg, model, optimizer, tokenizer = contestants["ssa-hybrid"]
    steps.clear()  # the other models' memory back before the epoch-long measurement
    contestants.clear()
    probing = {bf16: cfg.replace(options=cfg.options.replace(ssa_probe_bf16=bf16))
               for bf16 in (False, True)}
    ssa = [_ssa_label_share(probing[bf16], model, optimizer, tokenizer,
                            lines[:epoch_examples], epoch, epoch_repeats, accelerator)
           for bf16 in (False, True) for epoch in ssa_epochs]
    return {"batch_size": batch_size, "seq_len": seq_len, "threads": torch.get_num_threads(),
            "model": str(resolve_model_dir(model_name)), "text": source, "repeats": repeats,
            "pretrain_model": {"layers": pcfg.num_hidden_layers, "hidden": pcfg.hidden_size,
                               "heads": pcfg.num_attention_heads, "ag_head_types": pcfg.options.ag_head_types,
                               "tokens": tokens},
            "load_average": {"before": load_before, "after": machine_load()}, "methods": rows, "ssa_labels": ssa}


def _finetune_contestants(model_name, lines: list[str], batch_size: int, seq_len: int, accelerator,
                          fast_kernels: bool = True):
    """(steps, saved activation bytes, (cfg, model, optimizer, tokenizer) by method, tokenizer) for every
    fine-tuning method, each model built as finetune builds it and stepped on the same batch at lr 0."""
    from course_lib.tasks import batching
    from course_lib.training.config import FinetuneConfig
    from course_lib.training.loop import param_groups
    from course_lib.methods.registry import get_method
    from course_lib.runtime.repro import seed_everything
    from course_lib.methods.ssa import default_token_labels
    from course_lib.training.run import resolve
    from course_lib.training.task_model import build_classifier, load_encoder

    contestants, steps, saved, plain_features = {}, {}, {}, None
    for method in FINETUNE_METHODS:
        cfg = FinetuneConfig(method=method, model=model_name, max_len=seq_len, batch_size=batch_size)
        seed_everything(cfg.seed)
        run = resolve(cfg)
        encoder, tokenizer = load_encoder(run)
        model = build_classifier(run, encoder, tokenizer)
        if fast_kernels:  # as the training loop does
            optimize(model)
        optimizer = torch.optim.AdamW(param_groups(model, cfg.weight_decay), lr=0.0, fused=True)
        model, optimizer = accelerator.prepare(model, optimizer)
        model.train()
        features = plain_features = plain_features or fixed_length_features(lines, tokenizer, batch_size, seq_len)
        if get_method(method).token_labels:  # epoch-0 token labels: the SSA loss runs; its values do not matter
            special = batching.special_token_ids(tokenizer)
            features = [{**f, "token_labels": default_token_labels(f, special)} for f in features]
        contestants[method] = (cfg, model, optimizer, tokenizer)
        steps[method] = (lambda m=model, o=optimizer, f=features, c=cfg, t=tokenizer:
                         _finetune_step(m, o, f, t.pad_token_id, accelerator, c.max_grad_norm))
        saved[method] = saved_activation_bytes(
            lambda m=model, f=features, t=tokenizer: _batch_loss_only(m, f, t.pad_token_id, accelerator), model)
    return steps, saved, contestants, tokenizer


def _pretrain_contestants(pcfg, lines: list[str], tokenizer, accelerator, steps: dict, saved: dict) -> list[int]:
    """Add the MLM and MLM + AG steps of one small model (as pretrain builds it) to `steps` and `saved`;
    return the batch's shape."""
    from course_lib.methods.ag import ag_scale_at
    from course_lib.training.loop import param_groups
    from course_lib.training.mlm_data import mask_tokens, pack_blocks, pad_blocks, step_generator
    from course_lib.training.pretrain import build_mlm_model
    from course_lib.runtime.repro import seed_everything

    seed_everything(pcfg.seed)
    mlm_model, guidance = build_mlm_model(pcfg, tokenizer)
    if pcfg.fast_kernels:  # as the training loop does
        optimize(mlm_model)
    mlm_optimizer = torch.optim.AdamW(param_groups(mlm_model, pcfg.weight_decay), lr=0.0, fused=True)
    mlm_model, mlm_optimizer = accelerator.prepare(mlm_model, mlm_optimizer)
    mlm_model.train()
    input_ids, attention_mask = pad_blocks(pack_blocks(lines, tokenizer, pcfg.max_len)[:pcfg.batch_size],
                                           tokenizer.pad_token_id)
    inputs, labels = mask_tokens(input_ids, tokenizer.all_special_ids, tokenizer.mask_token_id, len(tokenizer),
                                 pcfg.mlm_probability, step_generator(pcfg.seed, 0))
    batch = (inputs, attention_mask, labels)
    alpha = ag_scale_at(0, pcfg.max_steps, pcfg.options.ag_scale, pcfg.options.ag_plateau_steps)
    for name, guide in (("mlm", None), ("ag", guidance)):
        steps[name] = (lambda g=guide: _pretrain_step(mlm_model, mlm_optimizer, batch, g, alpha, accelerator,
                                                      pcfg.max_grad_norm))
        saved[name] = saved_activation_bytes(
            lambda g=guide: _pretrain_step(mlm_model, None, batch, g, alpha, accelerator, 0.0), mlm_model)
    return list(input_ids.shape)


def _method_rows(times: dict, saved: dict) -> list[dict]:
    """Each method's median step time and its ratio to its baseline's (AG: plain MLM), against its target."""
    baseline = {name: ("mlm" if name in ("mlm", "ag") else "vanilla") for name in times}
    rows = []
    for name, seconds in times.items():
        ratio = ratio_summary(seconds, times[baseline[name]])
        target = STEP_TARGETS.get(name)
        rows.append({"method": name, "baseline": baseline[name],
                     "step_ms": round(1000 * statistics.median(seconds), 1), "ratio": ratio["median"],
                     "ratio_iqr": ratio["iqr"], "target": target,
                     "meets_target": None if target is None else ratio["median"] <= target,
                     "saved_activations_mb": round(saved[name] / 2**20, 1)})
    return rows


def _ssa_label_share(cfg, model, optimizer, tokenizer, lines: list[str], epoch: int, repeats: int,
                     accelerator) -> dict:
    """Label generation of one SSA epoch (`finetune.epoch_features`) against the training of that epoch's set."""
    from course_lib.tasks import batching, sentence
    from course_lib.training.finetune import epoch_features, predict
    from course_lib.training.run import resolve

    run = resolve(cfg)
    train = sentence.encode_examples([sentence.Example((line,), 0) for line in lines], tokenizer, cfg.max_len)
    own = predict(model, train, cfg.eval_batch_size, accelerator, tokenizer.pad_token_id, run.task,
                  run.family).long().tolist()
    train = [{**f, "label": label} for f, label in zip(train, own)]
    state: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        def generate_labels() -> None:  # a fresh folder each time, so the epoch's cache is never reused
            out = Path(tmp) / f"call{len(state)}"
            state[out] = epoch_features(run, epoch, train, model, tokenizer, accelerator, out)

        def train_epoch() -> None:  # the epoch loop of finetune.finetune over the last labelled set
            features, _ = state[next(reversed(state))]
            batches = batching.epoch_batches([len(f["input_ids"]) for f in features], cfg.batch_size, cfg.seed, epoch,
                                         shuffle=True, bucket=cfg.bucket_by_length)
            model.train()
            for rows in batches:
                _finetune_step(model, optimizer, [features[i] for i in rows], tokenizer.pad_token_id, accelerator,
                               cfg.max_grad_norm)

        generate_labels()  # also the warmup of the label path; the training path is warm from the step timings
        times = interleaved({"labels": generate_labels, "train": train_epoch}, repeats, 0, desc="SSA epoch")
    share = ratio_summary(times["labels"], times["train"])
    stats = state[next(reversed(state))][1]
    agreement = None
    if cfg.options.ssa_probe_bf16:  # how often a bf16 probe's class is the fp32 one's, on the epoch's originals
        with torch.autocast(accelerator.device.type, torch.bfloat16):
            bf16 = predict(model, train, cfg.eval_batch_size, accelerator, tokenizer.pad_token_id, run.task,
                           run.family).long()
        agreement = round((bf16 == torch.tensor(own)).double().mean().item(), 4)
    return {"epoch": epoch + 1, "probe": "bf16" if cfg.options.ssa_probe_bf16 else "fp32", "examples": len(train),
            "bf16_agrees_with_fp32": agreement, "aug_ratio": stats["aug_ratio"],
            "forward_passes": stats.get("originals", len(train)) + stats["probes"], "probes": stats["probes"],
            "labelled": stats["labelled"], "mean_tokens": round(statistics.mean(len(f["input_ids"]) for f in train), 1),
            "label_s": round(statistics.median(times["labels"]), 4),  # 0.1 ms: a tiny model labels in ms
            "epoch_train_s": round(statistics.median(times["train"]), 4), "share": share["median"],
            "share_iqr": share["iqr"], "target": SSA_LABEL_TARGET, "meets_target": share["median"] <= SSA_LABEL_TARGET}


def format_methods(results: dict) -> str:
    p = results["pretrain_model"]
    lines = [f"batch {results['batch_size']} x {results['seq_len']} tokens, {results['threads']} threads, "
             f"load average {results['load_average']['before']} -> {results['load_average']['after']}; "
             f"text: {results['text']}; AG on a {p['layers']}-layer d={p['hidden']} {p['heads']}-head BERT "
             f"(ag_head_types {p['ag_head_types']}, tokens {p['tokens']})",
             "| method | vs | step ms | ratio (IQR) | target | met | saved activations MB |",
             "|---|---|---|---|---|---|---|"]
    for r in results["methods"]:
        target = "" if r["target"] is None else f"<= {r['target']}x"
        met = "" if r["meets_target"] is None else ("yes" if r["meets_target"] else "NO")
        lines.append(f"| {r['method']} | {r['baseline']} | {r['step_ms']} | {r['ratio']}x "
                     f"({r['ratio_iqr'][0]}-{r['ratio_iqr'][1]}) | {target} | {met} | {r['saved_activations_mb']} |")
    for s in results["ssa_labels"]:
        agrees = f"; bf16 class = fp32 class on {s['bf16_agrees_with_fp32']:.1%}" if s["probe"] == "bf16" else ""
        lines.append(f"| ssa-hybrid labels, {s['probe']} probes, epoch {s['epoch']}, share {s['aug_ratio']} "
                     f"({s['examples']} examples, {s['forward_passes']} forward passes{agrees}) | "
                     f"its epoch's training ({s['epoch_train_s']:.2f} s) | {1000 * s['label_s']:.0f} | {s['share']:.0%} "
                     f"({s['share_iqr'][0]:.0%}-{s['share_iqr'][1]:.0%}) | <= {s['target']:.0%} | "
                     f"{'yes' if s['meets_target'] else 'NO'} | - |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# bench sparsemax: ours against entmax's


SPARSEMAX_TARGET = 2.0  # ours at least this many times faster than entmax.sparsemax, forward + backward


class _SortSparsemax(torch.autograd.Function):
    """The textbook closed form on whole rows (a full sort), from the same pieces: what the partial sort saves."""

    @staticmethod
    def forward(ctx, z):
        from course_lib.model.sparsemax import sparsemax_forward

        p = sparsemax_forward(z, -1)
        ctx.save_for_backward(p)
        return p

    @staticmethod
    def backward(ctx, grad):
        from course_lib.model.sparsemax import sparsemax_backward

        return sparsemax_backward(ctx.saved_tensors[0], grad, -1)


def _status(fn) -> str:
    """'finite', 'NaN' (or inf), or the exception a call raises."""
    try:
        return "finite" if bool(torch.isfinite(fn()).all()) else "NaN"
    except Exception as err:  # entmax's behaviour is what is being reported
        return f"raises {type(err).__name__}: {str(err).splitlines()[0][:80]}"


def fully_masked_rows(length: int = 128) -> list[dict]:
    """What ours and entmax give for a row whose every logit is masked, with each masking value in use."""
    import entmax

    from course_lib.model.sparsemax import sparsegen_lin

    rows = []
    for name, value in (("-inf", -math.inf), ("finfo(float32).min", torch.finfo(torch.float32).min),
                        ("-1e4 (classic BERT's mask)", -1e4)):
        entry = {"mask_value": name}
        for who, fn in (("ours", lambda z: sparsegen_lin(z, 0.0)), ("entmax", lambda z: entmax.sparsemax(z, -1))):
            row = torch.full((1, length), value, requires_grad=True)
            entry[f"{who}_output"] = _status(lambda: fn(row))

            def gradient() -> torch.Tensor:
                fn(row).backward(torch.randn(1, length, generator=torch.Generator().manual_seed(0)))
                return row.grad

            entry[f"{who}_grad"] = _status(gradient)
        rows.append(entry)
    return rows


def sparsemax_speed(shape=(32, 12, 128, 128), repeats: int = 10, warmup: int = 2, logit_std: float = 2.0,
                    lambdas=(0.0, -4.0)) -> dict:
    """Forward + backward of our sparsegen-lin against entmax.sparsemax(scores / (1 - lambda)), fp32.

    Scores are N(0, logit_std²) (supports of about 2 keys at lambda 0 and 7 at -4 when L = 128);
    softmax is timed for reference, and the full-sort closed form to show what the partial sort saves.
    """
    import entmax

    from course_lib.model.sparsemax import sparsegen_lin

    load_before = machine_load()
    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(shape, generator=gen) * logit_std
    upstream = torch.randn(shape, generator=gen)
    cases = []
    for lam in lambdas:
        temperature = 1.0 - lam
        contestants = {"ours": lambda z: sparsegen_lin(z, lam),
                       "entmax": lambda z: entmax.sparsemax(z / temperature if lam else z, dim=-1),
                       "full_sort": lambda z: _SortSparsemax.apply(z / temperature if lam else z),
                       "softmax": lambda z: torch.softmax(z, dim=-1)}

        def forward_backward(fn) -> tuple[torch.Tensor, torch.Tensor]:
            leaf = scores.detach().requires_grad_()
            out = fn(leaf)
            out.backward(upstream)
            return out.detach(), leaf.grad

        ours, ours_grad = forward_backward(contestants["ours"])
        ref, ref_grad = forward_backward(contestants["entmax"])
        times = interleaved({n: (lambda f=f: forward_backward(f)) for n, f in contestants.items()}, repeats, warmup,
                            desc=f"sparsemax lambda={lam}")
        faster = {n: ratio_summary(t, times["ours"]) for n, t in times.items() if n != "ours"}
        cases.append({"lambda": lam, "median_ms": {n: round(1000 * statistics.median(t), 1) for n, t in times.items()},
                      "ours_faster_than": faster, "mean_support": round((ours > 0).sum(-1).float().mean().item(), 2),
                      "max_abs_diff_vs_entmax": (ours - ref).abs().max().item(),
                      "max_abs_grad_diff_vs_entmax": (ours_grad - ref_grad).abs().max().item(),
                      "target": SPARSEMAX_TARGET if lam == 0 else None,
                      "meets_target": faster["entmax"]["median"] >= SPARSEMAX_TARGET if lam == 0 else None})
    return {"shape": list(shape), "dtype": "float32", "logit_std": logit_std, "threads": torch.get_num_threads(),
            "repeats": repeats, "load_average": {"before": load_before, "after": machine_load()},
            "entmax_version": getattr(entmax, "__version__", "?"), "cases": cases,
            "fully_masked_row": fully_masked_rows(shape[-1])}


def format_sparsemax(results: dict) -> str:
    lines = [f"scores {results['shape']} {results['dtype']}, N(0, {results['logit_std']}^2), forward + backward, "
             f"{results['threads']} threads, load average {results['load_average']['before']} -> "
             f"{results['load_average']['after']}; entmax {results['entmax_version']}",
             "| lambda | ours ms | entmax ms | full sort ms | softmax ms | ours vs entmax (IQR) | ours vs full sort "
             "| target | met | mean support | max diff vs entmax (p, grad) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in results["cases"]:
        m, f = c["median_ms"], c["ours_faster_than"]
        target = "" if c["target"] is None else f">= {c['target']}x"
        met = "" if c["meets_target"] is None else ("yes" if c["meets_target"] else "NO")
        lines.append(f"| {c['lambda']} | {m['ours']} | {m['entmax']} | {m['full_sort']} | {m['softmax']} | "
                     f"{f['entmax']['median']}x ({f['entmax']['iqr'][0]}-{f['entmax']['iqr'][1]}) | "
                     f"{f['full_sort']['median']}x | {target} | {met} | {c['mean_support']} | "
                     f"{c['max_abs_diff_vs_entmax']:.1e}, {c['max_abs_grad_diff_vs_entmax']:.1e} |")
    lines += ["", "fully masked row (every logit masked):",
              "| mask value | ours p | ours grad | entmax p | entmax grad |", "|---|---|---|---|---|"]
    lines += [f"| {r['mask_value']} | {r['ours_output']} | {r['ours_grad']} | {r['entmax_output']} | "
              f"{r['entmax_grad']} |" for r in results["fully_masked_row"]]
    return "\n".join(lines)


def main(args) -> None:
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.what == "methods":
        results = methods(args.model, args.batch_size, (args.seq_lens or [64])[0], args.repeats,
                          epoch_examples=args.epoch_examples, glue_dir=args.glue_dir,
                          fast_kernels=args.fast_kernels)
        print(json.dumps(results, indent=2) if args.as_json else format_methods(results))
    elif args.what == "sparsemax":
        seq = (args.seq_lens or [128])[0]
        results = sparsemax_speed((args.batch_size, 12, seq, seq), args.repeats)
        print(json.dumps(results, indent=2) if args.as_json else format_sparsemax(results))
    else:
        results = speed(args.model, args.batch_size, tuple(args.seq_lens or (64, 128)), args.repeats,
                        compiled=args.compile)
        print(json.dumps(results, indent=2) if args.as_json else format_speed(results))
        span = span_speed(args.model, args.qa_batch_size, repeats=max(2, args.repeats // 2))
        print(json.dumps(span, indent=2) if args.as_json else format_head_speed(span))
        tags = tagging_speed(args.model, args.batch_size, repeats=max(2, args.repeats // 2))
        print(json.dumps(tags, indent=2) if args.as_json else format_head_speed(tags))
