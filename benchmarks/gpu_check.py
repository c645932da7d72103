"""`bash ci/gpu_check.sh` (`python -m benchmarks.gpu_check`): what to measure the first time a GPU is at hand.

The course machines have no GPU, so everything GPU-specific is checked here, in one run of a few minutes that
writes one report (markdown plus the same numbers as JSON):

1. parity: our encoder against Hugging Face's `BertModel` (SDPA) on the same random-init weights, in fp32
   (TF32 off) and under bf16 autocast, outputs and gradients;
2. throughput: a training step (forward + backward, dropout on) under bf16 autocast, ours against HF, at
   batch 32 x 128 and 8 x 512 tokens;
3. methods: every fine-tuning method, plus MLM and AG pre-training, a few steps each under bf16 with every
   loss finite;
4. notebooks: every notebook's `paper` preset, shrunk to a few steps, its code cells executed in-process
   (papermill and a Jupyter kernel are often missing on GPU images);
5. two processes through `accelerate launch` when the machine has two GPUs;
6. loop: `finetune` end to end at the papers' shape against its step alone, per `compile` setting, with
   Hugging Face's model as the anchor and the card's own matrix-product rate as the yardstick (`gpu_loop`).

No hub is reachable there either, so the model is a random-init BERT of `bert-base-uncased`'s shape, made on the
spot; the GLUE tasks the repository ships (data/glue) are read from there, the others hold generated sentences: the
point is speed, numerics and that every path runs, not accuracy. On a CPU, `--device cpu --size tiny` runs the same
checks on a tiny model in minutes.
"""
from __future__ import annotations

import contextlib
import json
import linecache
import os
import platform
import random
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Literal

import torch
from pydantic import Field, field_validator, model_validator

from benchmarks.gpu_loop import loop_section, synchronize
from course_lib.runtime.command_line import DefaultsWhereUseful, add_fields, parsed
from course_lib.runtime.errors import Parser, UsageError, choice_error, report_errors
from course_lib.runtime.repro import atomic_write
from course_lib.runtime.settings import Settings
from course_lib.training.config import COMPILE

SHAPES = {  # Hugging Face config fields; base is bert-base-uncased's shape
    "base": dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, max_position_embeddings=512),
    "tiny": dict(vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=128, max_position_embeddings=512),
}
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SECTIONS = {  # what each section measures, as the report says it
    "parity": "our encoder vs Hugging Face's BertModel (SDPA), same random-init weights: fp32 with TF32 off "
              "(outputs, gradients) and bf16 autocast (each side's error against fp32)",
    "throughput": "training step (forward + backward, dropout on) under bf16 autocast, ours vs HF SDPA; "
                  "batch 32 x 128 and 8 x 512 on the base shape",
    "methods": "every fine-tuning method 2 epochs and MLM / AG pre-training 4 steps, bf16 on CUDA: losses finite",
    "notebooks": "every notebook's paper preset (model, methods, recipe) with data, steps and seeds cut down, "
                 "code cells executed in-process",
    "multi_gpu": "accelerate launch --num_processes 2: a short fine-tune completes",
    "loop": "finetune end to end at 32 x 128 (its second epoch, a few hundred steps) against the step alone, for "
            "each compile setting; Hugging Face eager and compiled; shares of the card's measured bf16 matmul rate",
}


# ----------------------------------------------------------------------------------------------
# A random-init model folder and generated GLUE data


def vocabulary(size: int) -> list[str]:
    """A WordPiece vocabulary of exactly `size` entries: the packaged MiniLM's when it fits, else generated.

    The generated one holds the generated corpus's words and every letter (whole and as '##' pieces), so
    the corpus tokenises without [UNK], then the shipped data's most frequent words, so real sentences are cut
    about as BERT's own vocabulary cuts them (not letter by letter) and a notebook's check on a word ('funny')
    finds it whole; the rest is filled with [unusedN] as BERT's own vocabulary is.
    """
    from course_lib.model.model_folder import default_model_dir

    with contextlib.suppress(UsageError, OSError):
        words = (default_model_dir() / "vocab.txt").read_text(encoding="utf-8").splitlines()
        if len(words) == size:
            return words
    from course_lib.training.mlm_data import generated_corpus

    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    found = sorted({w for line in generated_corpus(2000) for w in line.split()})
    words = list(dict.fromkeys(SPECIALS + letters + ["##" + c for c in letters] + list(".,'!?-") + found))
    if len(words) > size:
        raise UsageError(f"a vocabulary of {size} entries cannot hold the {len(words)} generated tokens")
    known = set(words)
    words += [w for w in shipped_words() if w not in known][:size - len(words)]
    return words + [f"[unused{i}]" for i in range(size - len(words))]


def shipped_words() -> list[str]:
    """The words of the GLUE sentences data/ ships, most frequent first (none when the folder is absent)."""
    import collections
    import re

    from course_lib.readers.local_data import shipped_folder

    counts = collections.Counter()
    folder = shipped_folder("GLUE_DIR")
    for path in sorted(folder.glob("*/*.tsv")) if folder is not None else []:
        counts.update(re.findall(r"[a-z]+|[0-9]+", path.read_text(encoding="utf-8").lower()))
    return [w for w, _ in counts.most_common()]


def make_random_model(folder: Path, shape: str, seed: int = 0) -> Path:
    """A Hugging Face BERT folder (config, random-init safetensors, tokenizer) that `--model` reads."""
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    if (folder / "model.safetensors").is_file():
        return folder
    words = vocabulary(SHAPES[shape]["vocab_size"])
    (folder / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    vocab = {word: index for index, word in enumerate(words)}
    transformers.BertTokenizerFast(vocab=vocab, do_lower_case=True).save_pretrained(folder)
    torch.manual_seed(seed)
    config = transformers.BertConfig(**SHAPES[shape], pad_token_id=0)
    transformers.BertModel(config, add_pooling_layer=True).save_pretrained(folder, safe_serialization=True)
    return folder


def write_generated_glue(folder: Path, train_rows: int = 256, dev_rows: int = 64, seed: int = 0,
                         shipped: bool = False) -> Path:
    """Every GLUE task's folder in the original TSV layout, filled with generated sentences and labels;
    shipped=True: a link to the repository's real copy for the tasks data/glue holds (SST-2, CoLA, ...)."""
    from course_lib.tasks.glue import GLUE_TASKS
    from course_lib.readers.local_data import shipped_folder
    from course_lib.training.mlm_data import generated_corpus

    rng = random.Random(seed)
    lines = generated_corpus(4 * (train_rows + dev_rows))
    real = shipped_folder("GLUE_DIR") if shipped else None
    for task in GLUE_TASKS.values():
        if real is not None and (real / task.folder).is_dir():
            folder.mkdir(parents=True, exist_ok=True)
            link = folder / task.folder
            if not link.is_symlink():
                shutil.rmtree(link, ignore_errors=True)
                link.symlink_to(real / task.folder)
            continue
        (folder / task.folder).mkdir(parents=True, exist_ok=True)
        for split in task.splits:
            rows = []
            for _ in range(train_rows if split == "train" else dev_rows):
                fields = {c: rng.choice(lines) for c in task.tsv.text_columns}
                fields[task.tsv.label_column] = (f"{rng.uniform(0, 5):.3f}" if task.is_regression
                                                 else rng.choice(task.label_names))
                rows.append(fields)
            columns = list(task.tsv.columns or [*task.tsv.text_columns, task.tsv.label_column])
            body = ["\t".join(r.get(c, "x") for c in columns) for r in rows]
            header = [] if task.tsv.columns else ["\t".join(columns)]
            (folder / task.folder / f"{split}.tsv").write_text("\n".join(header + body) + "\n", encoding="utf-8")
    return folder


def random_batch(vocab_size: int, batch: int, seq: int, device, seed: int = 0):
    """Random token ids (B, L), 0 (padding) where the attention mask is 0: odd rows end in padding, so the
    comparison covers masked keys too. A random-init model needs no real text."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(len(SPECIALS), vocab_size, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.long)
    for row in range(1, batch, 2):
        length = int(torch.randint(seq // 2, seq, (1,), generator=g))
        mask[row, length:] = 0
    ids = ids * mask
    return ids.to(device), mask.to(device)


# ----------------------------------------------------------------------------------------------
# 1. Parity with Hugging Face


def _pair(model_dir: Path, device):
    """(ours, HF BertModel with SDPA) on the same weights, dropout on in both (callers pick train/eval)."""
    import transformers

    from course_lib.model.weights import load_pretrained

    transformers.utils.logging.set_verbosity_error()
    ours, _ = load_pretrained(model_dir)
    hf = transformers.BertModel.from_pretrained(str(model_dir), attn_implementation="sdpa")
    return ours.to(device), hf.to(device)


def _real(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return x.float()[mask.bool()]


def parity(model_dir: Path, device, batch: int = 8, seq: int = 128) -> dict:
    """Largest differences on real tokens: fp32 ours vs HF; under bf16, each side's error against fp32 HF."""
    ours, hf = _pair(model_dir, device)
    ours.eval(), hf.eval()
    ids, mask = random_batch(hf.config.vocab_size, batch, seq, device)
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        with torch.no_grad():
            ref = hf(input_ids=ids, attention_mask=mask)
            mine = ours(ids, mask)
            bf16 = _bf16_errors(ours, hf, ids, mask, ref.last_hidden_state)
        grads = _gradient_diffs(ours, hf, ids, mask)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
    scale = _real(ref.last_hidden_state, mask).abs().max().item()
    result = {
        "shape": f"batch {batch} x {seq}, odd rows padded", "output_scale": round(scale, 3),
        "fp32_hidden_max_abs_diff": _real(mine.last_hidden_state - ref.last_hidden_state, mask).abs().max().item(),
        "fp32_pooler_max_abs_diff": (mine.pooler_output - ref.pooler_output).abs().max().item(),
        **bf16, **grads,
    }
    result["passed"] = bool(result["fp32_hidden_max_abs_diff"] <= 1e-4 * max(scale, 1.0)
                            and result["fp32_grad_max_rel_diff"] <= 1e-3
                            and ("bf16" in result  # not run on this CPU path, and said so
                                 or result["bf16_ours_vs_fp32_max_abs_diff"]
                                 <= 2 * result["bf16_hf_vs_fp32_max_abs_diff"]))
    return result


def _bf16_errors(ours, hf, ids, mask, reference) -> dict:
    """Each side's largest error under bf16 autocast against fp32 HF. On a CPU whose kernels cannot run bf16
    matmuls (torch's AVX2 kernels forced on an AVX-512 machine refuse them) the report says so instead: the GPU
    this check is for always runs them, and an error there fails the section."""
    try:
        with torch.autocast(ids.device.type, dtype=torch.bfloat16):
            ref16, mine16 = hf(input_ids=ids, attention_mask=mask), ours(ids, mask)
    except RuntimeError as err:
        if ids.device.type != "cpu":
            raise
        return {"bf16": f"not run on this CPU path: {err}"}
    return {"bf16_ours_vs_fp32_max_abs_diff": _real(mine16.last_hidden_state.float() - reference,
                                                    mask).abs().max().item(),
            "bf16_hf_vs_fp32_max_abs_diff": _real(ref16.last_hidden_state.float() - reference,
                                                  mask).abs().max().item()}


def _gradient_diffs(ours, hf, ids, mask) -> dict:
    """fp32 gradients of one loss through both models: word embeddings and the last FFN's output weight."""
    weight = torch.randn(hf.config.hidden_size, generator=torch.Generator().manual_seed(1)).to(ids.device)
    for model in (ours, hf):
        model.zero_grad(set_to_none=True)
    (ours(ids, mask).pooler_output @ weight).sum().backward()
    (hf(input_ids=ids, attention_mask=mask).pooler_output @ weight).sum().backward()
    last = hf.config.num_hidden_layers - 1
    pairs = [(ours.embeddings.word.weight.grad, hf.embeddings.word_embeddings.weight.grad),
             (ours.layers[last].ffn.down.weight.grad, hf.encoder.layer[last].output.dense.weight.grad)]
    rel = max(((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item() for a, b in pairs)
    return {"fp32_grad_max_rel_diff": rel}


# ----------------------------------------------------------------------------------------------
# 2. Training throughput


def throughput(model_dir: Path, device, shapes=((32, 128), (8, 512)), repeats: int = 10, warmup: int = 3) -> dict:
    """Median seconds of a bf16-autocast training step for ours (every position, and [CLS] only) and HF."""
    from course_lib.notebook.timing import interleaved, ratio_summary

    ours, hf = _pair(model_dir, device)
    ours.train(), hf.train()
    weight = torch.randn(hf.config.hidden_size, device=device)
    cases = []
    for batch, seq in shapes:
        ids, mask = random_batch(hf.config.vocab_size, batch, seq, device)

        def step(forward):
            def run():
                with torch.autocast(device.type, dtype=torch.bfloat16):
                    loss = (forward().float() @ weight).sum()
                loss.backward()
                synchronize(device)
            return run

        runs = {"ours": step(lambda: ours(ids, mask).pooler_output),
                "ours_cls": step(lambda: ours(ids, mask, cls_only=True).pooler_output),
                "hf_sdpa": step(lambda: hf(input_ids=ids, attention_mask=mask).pooler_output)}
        times = interleaved(runs, repeats, warmup, desc=f"train step {batch}x{seq}")
        median = {name: sorted(t)[len(t) // 2] for name, t in times.items()}
        cases.append({"batch": batch, "seq_len": seq, "median_s": {k: round(v, 5) for k, v in median.items()},
                      "tokens_per_s": {k: round(batch * seq / v) for k, v in median.items()},
                      "hf_over_ours": ratio_summary(times["hf_sdpa"], times["ours"]),
                      "hf_over_ours_cls": ratio_summary(times["hf_sdpa"], times["ours_cls"])})
    return {"cases": cases}


# ----------------------------------------------------------------------------------------------
# 3. Every method a few steps


def _finite_history(history: list[dict], key: str) -> bool:
    values = [entry[key] for entry in history if key in entry]
    return bool(values) and all(torch.isfinite(torch.tensor(float(v))) for v in values)


def _finite_pretrain(result: dict) -> bool:
    losses = [e["mlm_loss"] for e in result["train_curve"] + result["eval_curve"]]
    losses += [e["ag_loss"] for e in result["train_curve"] if "ag_loss" in e]
    return bool(losses) and all(torch.isfinite(torch.tensor(float(v))) for v in losses)


def one_run(name: str, run, describe) -> dict:
    """A row of the methods section: what `describe` says of the run's result and its seconds, or its error
    (one method failing leaves the others' rows); printed at once, so a timed-out check still shows it."""
    started = time.perf_counter()
    try:
        row = describe(run())
    except Exception as err:  # noqa: BLE001 - the report names it; the section fails
        row = {"finite": False, "error": f"{type(err).__name__}: {str(err)[:300]}"}
    row["seconds"] = round(time.perf_counter() - started, 1)
    print(f"methods: {name} {row}", flush=True)
    return row


def small_corpus(glue_dir: Path, path: Path, num_lines: int = 4000) -> str:
    """The first GLUE training sentences as a corpus file: a few pre-training steps read a fraction of them, and
    tokenising all 180,000 would take longer than the steps (about 10 s a run)."""
    from course_lib.training.config import PretrainConfig
    from course_lib.training.mlm_data import load_corpus

    lines, _ = load_corpus(PretrainConfig(glue_dir=str(glue_dir)))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines[:num_lines]) + "\n", encoding="utf-8")
    return str(path)


def methods(model_dir: Path, glue_dir: Path, work: Path, shape: str, device) -> dict:
    """Each fine-tuning method (2 epochs, so SSA's per-epoch relabelling runs) and MLM/AG pre-training."""
    from course_lib.training.config import FinetuneConfig, PretrainConfig
    from course_lib.methods.registry import every_method
    from course_lib.training.pretrain import pretrain
    from course_lib.training.finetune import finetune

    precision = "bf16" if device.type == "cuda" else "no"
    batch = 32 if shape == "base" else 8
    rows = {}
    for method in every_method():
        cfg = FinetuneConfig(task="sst2", model=str(model_dir), glue_dir=str(glue_dir), method=method,
                             output_dir=str(work / "methods" / method), max_train_samples=3 * batch,
                             max_eval_samples=32, epochs=2, max_len=128, batch_size=batch,
                             mixed_precision=precision, lr=2e-5)
        rows[method] = one_run(method, lambda: finetune(cfg), lambda result: {
            "finite": _finite_history(result["history"], "train_loss"),
            "train_loss": [round(h["train_loss"], 4) for h in result["history"]]})
    size, corpus = SHAPES[shape], small_corpus(glue_dir, work / "pretrain" / "corpus.txt")
    for method in ("mlm", "ag"):
        cfg = PretrainConfig(method=method, corpus=corpus, output_dir=str(work / "pretrain" / method),
                             tokenizer=str(model_dir),  # the image may lack the default model's package
                             max_steps=4, eval_every=2, eval_blocks=8, max_len=128, batch_size=batch,
                             num_hidden_layers=size["num_hidden_layers"], hidden_size=size["hidden_size"],
                             num_attention_heads=max(size["num_attention_heads"], 8) if shape == "tiny" else 12,
                             intermediate_size=size["intermediate_size"], mixed_precision=precision)
        rows[f"pretrain {method}"] = one_run(f"pretrain {method}", lambda: pretrain(cfg), lambda result: {
            "finite": _finite_pretrain(result)})
    return {"precision": precision, "runs": rows, "passed": all(r["finite"] for r in rows.values())}


# ----------------------------------------------------------------------------------------------
# 4. Every notebook's paper preset, a few steps


def shrink_paper_preset(name: str, model_dir: Path, work: Path, shape: str, compile: str = "preset") -> dict:
    """The notebook's `paper` parameters with the data, steps and seeds cut down; model, methods and recipe kept.
    compile: "preset" keeps the preset's setting (graphs) on a CUDA machine; "off" runs eagerly, a few steps
    being cheaper than compiling each run (the `loop` section measures the compiled step)."""
    from course_lib.notebook.params import load_preset

    params = load_preset(name, "paper")
    small = {"max_train_samples": 64, "max_eval_samples": 32, "max_steps": 4, "eval_every": 2,
             "probe_sentences": 16, "model": str(model_dir), "tokenizer": str(model_dir), "output_dir": str(work / "notebooks" / name),
             "runs_dir": str(work / "notebooks"), "squad_split": "articles",  # offline: SQUAD_DIR's dev file or skip
             "squad_train_questions": 32, "squad_eval_questions": 16, "squad_epochs": 1,
             "corpus_lines": 8000}  # notebook 04: a few steps read a fraction of the 180k GLUE sentences
    if shape == "tiny":
        small.update(batch_size=8, max_len=64, num_hidden_layers=2, hidden_size=64, num_attention_heads=8,
                     intermediate_size=128, squad_section=False,  # 64 positions: no room for a question and context
                     corpus_lines=2000)
    params.update({k: v for k, v in small.items() if k in params})
    if "epochs" in params:
        params["epochs"] = min(params["epochs"], 2)  # 2: SSA's labels are first probed at epoch 2
    if "seeds" in params:
        params["seeds"] = params["seeds"][:1]
    if "compile" in params and (compile == "off" or not torch.cuda.is_available()):
        params["compile"] = "off"  # CUDA graphs need the GPU this check is meant for; anywhere else, eager
    if "tasks" in params:  # the first task, and STS-B for the regression path when the preset has it
        params["tasks"] = list(dict.fromkeys(params["tasks"][:1] + [t for t in params["tasks"] if t == "stsb"]))
    if "task_overrides" in params:
        params["task_overrides"] = {t: {k: v for k, v in o.items() if k != "epochs"}
                                    for t, o in params["task_overrides"].items() if t in params["tasks"]}
    return params


def execute_in_process(name: str, params: dict) -> float:
    """Run the notebook's code cells in this process, `params` injected after its parameters cell.

    What papermill does, without a kernel: the cells run in order in one namespace, in the notebooks folder
    (their relative paths start there), with matplotlib drawing off screen. Returns the seconds taken.
    """
    import matplotlib

    from course_lib.notebook.params import NOTEBOOK_DIR, notebook_path

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = [c for c in json.loads(notebook_path(name).read_text(encoding="utf-8"))["cells"]
             if c["cell_type"] == "code"]
    namespace = {"__name__": "__main__", "display": print}
    started, cwd = time.perf_counter(), os.getcwd()
    os.chdir(NOTEBOOK_DIR)
    try:
        for index, cell in enumerate(cells):
            source, filename = "".join(cell["source"]), f"{name} [code cell {index}]"
            linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)  # for tracebacks
            exec(compile(source, filename, "exec"), namespace)
            if "parameters" in cell.get("metadata", {}).get("tags", []):
                namespace.update(params)
            plt.close("all")
    finally:
        os.chdir(cwd)
    return round(time.perf_counter() - started, 1)


def notebooks(model_dir: Path, work: Path, shape: str, compile: str = "off") -> dict:
    """Each notebook's paper preset, shrunk; a notebook that raises is recorded with its error and the rest go on."""
    from course_lib.notebook.params import notebook_names

    rows = {}
    for name in notebook_names():
        params = shrink_paper_preset(name, model_dir, work, shape, compile)
        try:
            rows[name] = {"passed": True, "seconds": execute_in_process(name, params)}
        except Exception as err:  # noqa: BLE001 - the report names it; the other notebooks still run
            where = [f"{f.filename}, line {f.lineno}: {f.line}" for f in traceback.extract_tb(err.__traceback__)
                     if f.filename.startswith(name)]
            rows[name] = {"passed": False, "error": f"{type(err).__name__}: {str(err)[:300]}",
                          "where": where[-1] if where else None}
        print(f"notebooks: {name} {rows[name]}", flush=True)  # a timed-out check still shows those it ran
    return {"compile": compile, "runs": rows, "passed": all(r["passed"] for r in rows.values())}


# ----------------------------------------------------------------------------------------------
# 5. Several GPUs


def multi_gpu(model_dir: Path, glue_dir: Path, work: Path) -> dict:
    """`accelerate launch` with two processes, one GPU each: a short fine-tune must complete."""
    count = torch.cuda.device_count()
    if count < 2:
        return {"skipped": f"{count} GPU(s) on this machine; two are needed"}
    command = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "2", "-m", "course_lib",
               "finetune", "--task", "sst2", "--model", str(model_dir), "--glue-dir", str(glue_dir),
               "--max-train-samples", "128", "--max-eval-samples", "32", "--epochs", "1", "--batch-size", "32",
               "--mixed-precision", "bf16", "--output-dir", str(work / "multi_gpu")]
    done = subprocess.run(command, capture_output=True, text=True)
    return {"command": " ".join(command[1:]), "passed": done.returncode == 0, "stderr_tail": done.stderr[-500:]}


# ----------------------------------------------------------------------------------------------
# Report and entry point


def environment(device) -> dict:
    import transformers

    info = {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "device": str(device),
            "cpu_threads": torch.get_num_threads()}
    if device.type == "cuda":
        info.update(gpu=torch.cuda.get_device_name(device), gpus=torch.cuda.device_count(),
                    cuda=torch.version.cuda, bf16_supported=torch.cuda.is_bf16_supported())
    return info


def format_report(results: dict) -> str:
    """Markdown: the environment, then each section's verdict and numbers."""
    env = results["environment"]
    lines = ["# GPU check", "", f"Command: `{results['command']}`", "",
             f"Model: random-init BERT, shape {results['shape']}; data: the shipped GLUE tasks, generated "
             f"sentences for the others.", "",
             "| | |", "|---|---|", *[f"| {k} | {v} |" for k, v in env.items()], ""]
    for section in SECTIONS:
        if section not in results:
            continue
        body = results[section]
        verdict = ("skipped" if "skipped" in body else "error" if "error" in body else
                   "measured" if "passed" not in body else "PASS" if body["passed"] else "FAIL")
        lines += [f"## {section}: {verdict} ({body.get('section_seconds', '?')} s)", "", SECTIONS[section], "",
                  "```json",
                  json.dumps({k: v for k, v in body.items() if k != "section_seconds"}, indent=1), "```", ""]
    return "\n".join(lines)


def _comma_words(value):
    """`--sections loop,parity` or `--sections loop parity`: the words, in order."""
    words = [value] if isinstance(value, str) else value
    return value if words is None else tuple(w.strip() for word in words for w in word.split(",") if w.strip())


class GpuCheck(Settings):
    """The GPU check's options; the model's shape follows the device unless given."""

    device: Literal["cuda", "cpu"] = Field(default_factory=lambda: "cuda" if torch.cuda.is_available() else "cpu",
                                           description="where the checks run (default: cuda where torch sees one)")
    size: Literal[tuple(sorted(SHAPES))] | None = Field(None, description="model shape: base (bert-base-uncased's, "
                                                        "the default on CUDA) or tiny (CPU default)")
    sections: tuple[str, ...] = Field(tuple(SECTIONS), description=f"comma list of {', '.join(SECTIONS)} "
                                      "(default: all)")
    notebook_compile: Literal["off", "preset"] = Field("off", description="the notebooks section's compile setting: "
                                                       "off (a few steps each, no compile time) or the paper "
                                                       "presets' own (graphs), which costs a compilation per run")
    loop_compile: tuple[str, ...] | None = Field(None, description="the loop section's compile settings, a comma "
                                                 "list of off, default, graphs (default: all three on a GPU; a lease "
                                                 "too short for every compilation can measure one)")
    work_dir: str = Field("runs/gpu_check", description="random model, generated data, run folders")
    report: str | None = Field(None, description="markdown report (default: WORK_DIR/report.md)")

    _words = field_validator("sections", "loop_compile", mode="before")(_comma_words)

    @model_validator(mode="after")
    def _runnable_here(self):
        for section in self.sections:
            if section not in SECTIONS:
                raise choice_error("section", section, SECTIONS)
        for mode in self.loop_compile or ():
            if mode not in COMPILE:
                raise choice_error("loop compile setting", mode, COMPILE)
            if mode == "graphs" and self.device != "cuda":
                raise UsageError("--loop-compile graphs needs --device cuda: CUDA graphs run on GPUs only "
                                 "(valid here: off, default)")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise UsageError("--device cuda, but torch sees no CUDA device (valid here: cpu)")
        return self

    @property
    def shape(self) -> str:
        return self.size or ("base" if self.device == "cuda" else "tiny")


def parse_args(argv: list[str] | None) -> GpuCheck:
    parser = Parser(prog="python -m benchmarks.gpu_check", description=__doc__.split("\n")[0],
                    formatter_class=DefaultsWhereUseful)
    add_fields(parser, GpuCheck, words=True)
    return parsed(parser.parse_strict(argv), GpuCheck)


def main(argv: list[str] | None = None) -> int:
    return report_errors(lambda: run_checks(parse_args(argv), argv), "the GPU check; its report was not written")


def run_checks(args: GpuCheck, argv: list[str] | None) -> int:
    """Every chosen section in turn; a section that raises is reported as an error and the rest still run."""
    for name, value in (("TQDM_DISABLE", "1"), ("HF_HUB_OFFLINE", "1"), ("HF_DATASETS_OFFLINE", "1"),
                        ("MPLBACKEND", "Agg")):  # a batch job on a machine without the hub or a screen
        os.environ.setdefault(name, value)
    device, work = torch.device(args.device), Path(args.work_dir).resolve()
    model_dir = make_random_model(work / f"bert-{args.shape}-random", args.shape)
    glue_dir = write_generated_glue(work / "glue", train_rows=1000, shipped=True)  # real where data/ has it
    os.environ["GLUE_DIR"] = str(glue_dir)  # the notebooks read GLUE from here
    calls = {"parity": lambda: parity(model_dir, device),
             "throughput": lambda: throughput(model_dir, device, ((32, 128), (8, 512)) if args.shape == "base"
                                              else ((8, 64),), repeats=10 if args.device == "cuda" else 3),
             "methods": lambda: methods(model_dir, glue_dir, work, args.shape, device),
             "notebooks": lambda: notebooks(model_dir, work, args.shape, args.notebook_compile),
             "multi_gpu": lambda: multi_gpu(model_dir, glue_dir, work),
             "loop": lambda: loop_section(model_dir, glue_dir, work, device, args.shape, args.loop_compile)}
    results = {"command": "python -m benchmarks.gpu_check " + " ".join(sys.argv[1:] if argv is None else argv),
               "shape": {"size": args.shape, **SHAPES[args.shape]}, "environment": environment(device)}
    for section in args.sections:
        started = time.perf_counter()
        try:
            results[section] = calls[section]()
        except Exception as err:  # noqa: BLE001 - one broken section must not hide the others' numbers
            results[section] = {"error": f"{type(err).__name__}: {str(err)[:500]}", "passed": False}
        results[section]["section_seconds"] = round(time.perf_counter() - started, 1)
        print(f"{section}: {json.dumps(results[section])[:400]}", flush=True)
    report = Path(args.report or work / "report.md")
    atomic_write(report, lambda f: f.write(format_report(results).encode("utf-8")))
    atomic_write(report.with_suffix(".json"), lambda f: f.write(json.dumps(results, indent=1).encode("utf-8")))
    print(f"report: {report}")
    return 0 if all(r.get("passed", True) for k, r in results.items() if k in SECTIONS) else 1


if __name__ == "__main__":
    sys.exit(main())
