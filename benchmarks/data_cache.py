"""Reading and encoding an MNLI-sized task before the first step: ours (the encoded-data cache cold, then warm)
against run_glue's path (`datasets.load_dataset("csv")` + `Dataset.map(batched=True)`, its Arrow cache cleared,
then warm), side by side in one run, on the same files, tokenizer and length. Each case runs in a fresh process,
so its peak resident memory (imports included) is its own; the cases alternate, ours first, for `--rounds`.

    .venv/bin/python benchmarks/data_cache.py [--pairs 392702] [--rounds 2] [--out runs/bench/data_cache]

The MNLI-sized folder is built from the shipped SST-2 training sentences: `--pairs` training pairs and GLUE's
dev sizes (9,815 matched, 9,832 mismatched), in MNLI's layout, labels drawn with a fixed seed. Ours is what
`finetune --task mnli --glue-dir DIR` runs before its `data ready` line: `split_features` of the training and both
dev splits (the cache's key from the files' content, then the entry read, or the split read, encoded and written). Writes a markdown table (results/data_cache.md quotes it).
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPLITS = {"train": None, "dev_matched": 9815, "dev_mismatched": 9832}  # None: --pairs
LABELS = ("entailment", "neutral", "contradiction")
MAX_LEN = 128


def build_folder(glue: Path, pairs: int) -> Path:
    """GLUE_DIR/MNLI/{train,dev_matched,dev_mismatched}.tsv made of SST-2's training sentences (once per size)."""
    folder = glue / "MNLI"
    done = folder / f".pairs-{pairs}"
    if done.exists():
        return glue
    with open(ROOT / "data/glue/SST-2/train.tsv", encoding="utf-8", newline="") as f:
        sentences = [row[0].strip() for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)][1:]
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    rng = random.Random(0)
    for split, rows in SPLITS.items():
        with open(folder / f"{split}.tsv", "w", encoding="utf-8") as out:
            out.write("sentence1\tsentence2\tgold_label\n")
            for _ in range(rows or pairs):
                out.write(f"{rng.choice(sentences)}\t{rng.choice(sentences)}\t{rng.choice(LABELS)}\n")
    done.touch()
    return glue


def ours(glue: Path) -> dict:
    """finetune's data path up to `data ready`, with the cache $ATTENTION_LAB_CACHE names."""
    started = time.perf_counter()
    from course_lib.model.model_folder import load_tokenizer
    from course_lib.training.config import FinetuneConfig
    from course_lib.training.finetune import split_features
    from course_lib.training.run import resolve
    run = resolve(FinetuneConfig(task="mnli", glue_dir=str(glue), max_len=MAX_LEN))
    tokenizer = load_tokenizer(run.model_dir)
    imported, seconds = time.perf_counter(), {"read": 0.0}
    rows = sum(len(split_features(run, split, tokenizer, split == "train", seconds)) for split in SPLITS)
    return {"seconds": time.perf_counter() - imported, "import_seconds": imported - started, "rows": rows,
            "read_seconds": seconds["read"]}


def run_glue(glue: Path, cache: Path) -> dict:
    """run_glue's path: the three TSV files through `datasets`' csv builder, then `map` with the tokenizer."""
    started = time.perf_counter()
    import datasets
    from course_lib.model.model_folder import default_model_dir, load_tokenizer
    datasets.disable_progress_bars()
    tokenizer = load_tokenizer(default_model_dir())
    imported = time.perf_counter()
    files = {split: str(glue / "MNLI" / f"{split}.tsv") for split in SPLITS}
    raw = datasets.load_dataset("csv", data_files=files, delimiter="\t", quoting=csv.QUOTE_NONE, cache_dir=str(cache))
    encoded = raw.map(lambda b: tokenizer(b["sentence1"], b["sentence2"], truncation=True, max_length=MAX_LEN),
                      batched=True)
    return {"seconds": time.perf_counter() - imported, "import_seconds": imported - started,
            "rows": sum(len(split) for split in encoded.values())}


def child(args) -> int:
    result = ours(args.glue) if args.child == "ours" else run_glue(args.glue, args.datasets_cache)
    result["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    print(json.dumps(result))
    return 0


def measure(case: str, glue: Path, out: Path, fresh: bool) -> dict:
    """One case in a fresh process; `fresh`: its cache emptied first (the cold case)."""
    cache = out / f"{case}_cache"
    if fresh:
        shutil.rmtree(cache, ignore_errors=True)
    env = {"ATTENTION_LAB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TQDM_DISABLE": "1"}
    done = subprocess.run([sys.executable, __file__, "--child", case, "--glue", str(glue), "--datasets-cache",
                           str(cache)], capture_output=True, text=True, env={**os.environ, **env}, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(results: dict[tuple[str, str], list[dict]], pairs: int) -> str:
    """Medians over rounds, ours against run_glue's in each column."""
    def median(case, key):
        return statistics.median(r[key] for r in results[case])
    lines = [f"MNLI-sized ({pairs:,} training pairs, 19,647 dev), max_len {MAX_LEN}, medians of "
             f"{len(next(iter(results.values())))} rounds", "",
             "| | ours | run_glue's (`datasets`) | ours / theirs |", "|---|---|---|---|"]
    for state in ("cold", "warm"):
        a, b = median(("ours", state), "seconds"), median(("datasets", state), "seconds")
        lines.append(f"| {state}: read + encode, s | {a:.2f} | {b:.2f} | {a / b:.2f}x |")
        a, b = median(("ours", state), "peak_mb"), median(("datasets", state), "peak_mb")
        lines.append(f"| {state}: peak memory of the process, MB | {a:.0f} | {b:.0f} | {a / b:.2f}x |")
    a, b = median(("ours", "cold"), "import_seconds"), median(("datasets", "cold"), "import_seconds")
    lines.append(f"| imports and tokenizer (not counted above), s | {a:.2f} | {b:.2f} | |")
    return "\n".join(lines)


def main() -> int:
    """Plain argparse, not a settings model: a child process must import nothing of ours (nor pydantic) before its
    clock starts, or the import times it measures would be short."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=392702, help="training pairs (MNLI has 392,702)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, each running every case once")
    parser.add_argument("--out", type=Path, default=ROOT / "runs/bench/data_cache")
    parser.add_argument("--child", choices=("ours", "datasets"), help=argparse.SUPPRESS)
    parser.add_argument("--glue", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--datasets-cache", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    glue = build_folder(args.out / "glue", args.pairs)
    results: dict[tuple[str, str], list[dict]] = {}
    for _ in range(args.rounds):
        for case in ("ours", "datasets"):
            for state in ("cold", "warm"):
                results.setdefault((case, state), []).append(measure(case, glue, args.out, state == "cold"))
    rows = {r["rows"] for runs in results.values() for r in runs}
    assert len(rows) == 1, f"the cases read different numbers of rows: {rows}"
    report = table(results, args.pairs)
    (args.out / "report.md").write_text(report + "\n")
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
