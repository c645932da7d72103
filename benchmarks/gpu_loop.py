"""The GPU check's `loop` section: what a fine-tuning run from the command line costs, against its step alone.

A step alone is the model's forward, backward, clip and fused AdamW step on SST-2 batches staged on the device
beforehand, run back to back and timed between two synchronisations. The loop is `finetune` itself on the shipped
SST-2 (generated sentences where the repository's data is absent): batches built on the host, the progress bar, the
logging reads. Its steady state is the second epoch's wall time over its steps (the first holds the compilation).
Both run at the papers' shape, 32 x 128 under bf16 autocast, for each `compile` setting; Hugging Face's
`BertForSequenceClassification`, eager and compiled, is the anchor. Each is also given as a share of the card's own
bf16 matrix-product rate, measured here: the step's arithmetic (6N + 12·L·d·S per token, N the encoder's parameters
outside the embeddings) over its time, over that rate.
"""
from __future__ import annotations

import contextlib
import shutil
import time
from pathlib import Path

import torch

from course_lib.readers import local_data

PAPER_SHAPE = (32, 128)


def synchronize(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def matmul_rate(device, size: int, repeats: int = 10) -> float:
    """TFLOP/s of a (size x size) @ (size x size) product in bf16 (a GPU's tensor cores) or fp32 (a CPU)."""
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a, b = (torch.randn(size, size, device=device, dtype=dtype) for _ in range(2))
    for _ in range(3):
        a @ b
    synchronize(device)
    started = time.perf_counter()
    for _ in range(repeats):
        a @ b
    synchronize(device)
    return 2 * size ** 3 * repeats / (time.perf_counter() - started) / 1e12


def step_flops(config, batch: int, seq: int) -> float:
    """Training FLOPs of one step: 6 per parameter per token for the layers' products, plus attention's."""
    d, layers = config.hidden_size, config.num_hidden_layers
    per_layer = 4 * d * d + 2 * d * config.intermediate_size  # Q, K, V, output and the feed-forward pair
    return batch * seq * (6 * layers * per_layer + 12 * layers * d * seq)


def timed_steps(step, device, steps: int, warmup: int | None = None) -> float:
    """Mean seconds of a step over `steps` run back to back (the host queues ahead, as in a run), after
    `warmup` untimed ones (default `steps`: one pass over the batches, so every shape is compiled, and under
    `graphs` recorded, before the clock starts)."""
    warmup = steps if warmup is None else warmup
    for _ in range(warmup):
        step()
    synchronize(device)
    started = time.perf_counter()
    for _ in range(steps):
        step()
    synchronize(device)
    return (time.perf_counter() - started) / steps


def sst2_batches(glue_dir: Path, model_dir: Path, count: int, graphs: bool, seed: int = 0) -> list[dict]:
    """`count` batches of 32 SST-2 training sentences, tokenized as the loop does (cut at 128 tokens, padded
    to each batch's longest; under `graphs` to the next fixed length), so the step alone sees the loop's shapes."""
    import random

    from course_lib.model.model_folder import load_tokenizer
    from course_lib.runtime.compiled import pad_batch

    batch, max_len = PAPER_SHAPE
    lines = (glue_dir / "SST-2" / "train.tsv").read_text(encoding="utf-8").splitlines()[1:]
    rows = random.Random(seed).sample(lines, batch * count)
    tokenizer = load_tokenizer(model_dir)
    batches = []
    for start in range(0, len(rows), batch):
        part = [row.split("\t") for row in rows[start:start + batch]]
        enc = tokenizer([p[0] for p in part], truncation=True, max_length=max_len, padding=True, return_tensors="pt")
        one = {**{k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids")},
               "labels": torch.tensor([int(p[1]) for p in part])}
        batches.append(pad_batch(one, tokenizer.pad_token_id, max_len) if graphs else one)
    return batches


def random_batches(vocab_size: int, shape: tuple) -> list[dict]:
    """One full-length batch of random ids: the arithmetic-bound case."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, vocab_size, shape, generator=generator)
    return [{"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids),
             "labels": torch.randint(0, 2, (shape[0],), generator=generator)}]


def training_step(model, device, batches: list[dict], call):
    """Steps of `model` (ours or Hugging Face's; `call(batch)` gives the loss) over `batches`, staged on the
    device beforehand and taken in turn: the step alone, with none of the loop's host work."""
    staged = [{k: v.to(device) for k, v in b.items()} for b in batches]
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, fused=True)  # as the training loops
    precision = torch.bfloat16 if device.type == "cuda" else torch.float32
    turn = iter(range(10 ** 9))

    def step():
        with torch.autocast(device.type, dtype=precision, enabled=device.type == "cuda"):
            loss = call(staged[next(turn) % len(staged)])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def ours_step_seconds(model_dir: Path, device, compile: str, batches: list[dict], steps: int) -> float:
    from course_lib.fast import optimize
    from course_lib.model.heads import SequenceClassifier
    from course_lib.model.weights import load_pretrained
    from course_lib.runtime.compiled import compile_modules

    encoder, _ = load_pretrained(model_dir)
    model = SequenceClassifier(encoder, 2, 0.1).to(device).train()
    if compile == "off":
        optimize(model)  # as the loop does by default (on a GPU its kernels fall back to torch's)
    compile_modules([model], compile)
    step = training_step(model, device, batches, lambda b: model(
        b["input_ids"], b["attention_mask"], b["token_type_ids"], labels=b["labels"]).loss)
    return timed_steps(step, device, steps)


def hf_step_seconds(model_dir: Path, device, compiled: bool, batches: list[dict], steps: int) -> float:
    import transformers

    model = transformers.BertForSequenceClassification.from_pretrained(
        str(model_dir), num_labels=2, attn_implementation="sdpa").to(device).train()
    if compiled:
        model.compile()
    step = training_step(model, device, batches, lambda b: model(**b).loss)
    return timed_steps(step, device, steps)


@contextlib.contextmanager
def segment_times():
    """The wall seconds of each training segment (epoch) of the runs inside, in order."""
    from course_lib.training import loop

    times, real = [], loop.TrainingLoop._train_segment

    def timed(self, job, segment):
        started = time.perf_counter()
        real(self, job, segment)
        synchronize(self.accelerator.device)
        times.append((time.perf_counter() - started, job.steps_per_epoch))
    loop.TrainingLoop._train_segment = timed
    try:
        yield times
    finally:
        loop.TrainingLoop._train_segment = real


def loop_step_seconds(model_dir: Path, glue_dir: Path, work: Path, device, compile: str, steps: int) -> float:
    """finetune's steady-state seconds a step: the second epoch of a 2-epoch run of `steps` steps an epoch."""
    from course_lib.training.config import FinetuneConfig
    from course_lib.training.finetune import finetune

    batch, seq = PAPER_SHAPE
    out = work / "loop" / compile
    shutil.rmtree(out, ignore_errors=True)  # a finished run there would be read back, not timed
    cfg = FinetuneConfig(task="sst2", model=str(model_dir), glue_dir=str(glue_dir), max_train_samples=steps * batch,
                         max_eval_samples=batch, epochs=2, max_len=seq, batch_size=batch, compile=compile,
                         mixed_precision="bf16" if device.type == "cuda" else "no",
                         output_dir=str(out))
    with segment_times() as times:
        finetune(cfg)
    seconds, n = times[-1]
    return seconds / n


def sst2_folder(generated: Path) -> tuple[Path, str]:
    """The shipped GLUE folder when the repository's data is there, else the generated one."""
    shipped = local_data.shipped_folder("GLUE_DIR")
    if shipped is not None and (shipped / "SST-2" / "train.tsv").is_file():
        return shipped, "shipped SST-2"
    return generated, "generated sentences"


def loop_section(model_dir: Path, generated_glue: Path, work: Path, device, shape_name: str,
                 modes: tuple[str, ...] | None = None) -> dict:
    """Each compile setting's step alone and loop (default: all three on a GPU, `off` on a CPU); Hugging Face's
    steps; shares of the measured matmul rate. The large batch runs under the last setting."""
    from course_lib.model.model_folder import read_model_config

    on_gpu = device.type == "cuda"
    modes = modes or (("off", "default", "graphs") if on_gpu else ("off",))
    steps, loop_steps = (50, 300) if on_gpu else (3, 4)
    config = read_model_config(model_dir)
    rate = matmul_rate(device, 8192 if on_gpu else 512)
    glue_dir, data = sst2_folder(generated_glue)
    cases = []
    for mode in modes:
        batches = sst2_batches(glue_dir, model_dir, steps, graphs=mode == "graphs")
        alone = ours_step_seconds(model_dir, device, mode, batches, steps)
        looped = loop_step_seconds(model_dir, glue_dir, work, device, mode, loop_steps)
        tokens = sum(b["input_ids"].numel() for b in batches) / len(batches) / PAPER_SHAPE[0]
        cases.append({"compile": mode, "mean_padded_length": round(tokens, 1), "step_alone_ms": round(1e3 * alone, 2),
                      "loop_ms": round(1e3 * looped, 2), "loop_over_step_alone": round(alone / looped, 3),
                      "step_share_of_matmul_rate": round(step_flops(config, PAPER_SHAPE[0], tokens) / alone / 1e12
                                                         / rate, 3)})
        print(f"loop: {cases[-1]}", flush=True)  # a timed-out check still shows the settings it finished
    plain = sst2_batches(glue_dir, model_dir, steps, graphs=False)
    hf = {"eager_ms": round(1e3 * hf_step_seconds(model_dir, device, False, plain, steps), 2)}
    if on_gpu:
        hf["compiled_ms"] = round(1e3 * hf_step_seconds(model_dir, device, True, plain, steps), 2)
    big = (256, 128) if shape_name == "base" else (16, 64)
    big_seconds = ours_step_seconds(model_dir, device, modes[-1], random_batches(config.vocab_size, big),
                                    max(3, steps // 5))
    return {"batch": PAPER_SHAPE[0], "max_len": PAPER_SHAPE[1], "data": data, "matmul_tflops": round(rate, 1),
            "cases": cases, "hf": hf,
            "large_batch": {"shape": list(big), "compile": modes[-1], "ms": round(1e3 * big_seconds, 2),
                            "share_of_matmul_rate": round(step_flops(config, *big) / big_seconds / 1e12 / rate, 3)}}
