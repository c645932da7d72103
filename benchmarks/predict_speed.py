"""`python -m benchmarks predict`: our `predict` against a transformers text-classification pipeline on the same
run exported (`export`), the same SST-2 sentences and batch size, interleaved rounds in one process.

Both read the sentences and write nothing the other does not: ours reads a TSV and writes its JSON lines, the
pipeline gets the list and returns its dicts. Without `--run`, a short SST-2 run (the packaged MiniLM, 2,000
training sentences, one epoch at lr 1e-4) is trained once into the output folder; the speed does not depend on how
well it learnt, but the agreement below means more when the classes vary. The report also gives how often the two pick the same class (they hold the same weights: 1.0 but for ties).
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from course_lib.notebook.timing import interleaved, machine_load, ratio_summary
from course_lib.readers import local_data
from course_lib.runtime.errors import UsageError
from course_lib.training.export import EXPORT_DIR, export_run
from course_lib.training.predict import predict_file
from course_lib.tasks import glue
from course_lib.training.config import FinetuneConfig
from course_lib.training.finetune import finetune


def sst2_sentences(glue_dir: str | None, count: int) -> list[str]:
    """The first `count` sentences of SST-2's training set (--glue-dir, $GLUE_DIR, else data/glue)."""
    folder = local_data.data_folder("GLUE_DIR", glue_dir)
    if folder is None:
        raise UsageError("bench predict reads SST-2's training sentences: set GLUE_DIR or --glue-dir")
    return [ex.texts[0] for ex in glue.load_split("sst2", "train", folder)[:count]]


def prepared_run(run: str | None, output_dir: Path, model: str | None) -> Path:
    """The finished run to time: the one given, else a short SST-2 run trained here once."""
    if run is not None:
        return Path(run)
    folder = output_dir / "sst2_run"
    finetune(FinetuneConfig(task="sst2", model=model, max_train_samples=2000, max_eval_samples=200, epochs=1,
                            lr=1e-4, max_len=64, output_dir=str(folder)))
    return folder


def measure(run_dir: Path, sentences: list[str], batch_size: int, repeats: int, work: Path) -> dict:
    """Seconds per round of each, their per-round ratio, and the share of sentences both give the same class."""
    import transformers

    hf_dir = run_dir / EXPORT_DIR if (run_dir / EXPORT_DIR / "config.json").is_file() else export_run(run_dir)
    inputs = work / "sentences.tsv"
    inputs.write_text("sentence\n" + "".join(s.replace("\t", " ") + "\n" for s in sentences))
    max_len = json.loads((run_dir / "metrics.json").read_text())["config"]["max_len"]
    pipe = transformers.pipeline("text-classification", model=str(hf_dir), tokenizer=str(hf_dir), device=-1)
    answers = {}

    def ours():
        answers["ours"] = predict_file(run_dir, inputs, work / "ours.jsonl", batch_size)

    def theirs():
        answers["theirs"] = pipe(sentences, batch_size=batch_size, truncation=True, max_length=max_len)

    load_before = machine_load()
    times = interleaved({"ours": ours, "transformers": theirs}, repeats, warmup=0, desc="predict")
    ours_labels = [json.loads(line)["label"] for line in answers["ours"].read_text().splitlines()]
    same = sum(a == b["label"] for a, b in zip(ours_labels, answers["theirs"])) / len(sentences)
    return {"sentences": len(sentences), "batch_size": batch_size, "threads": torch.get_num_threads(),
            "seconds": {name: [round(s, 2) for s in values] for name, values in times.items()},
            "transformers / ours": ratio_summary(times["transformers"], times["ours"]), "same_class": same,
            "load_average": {"before": load_before, "after": machine_load()}}


def format_report(result: dict) -> str:
    ratio = result["transformers / ours"]
    return "\n".join([
        f"{result['sentences']} SST-2 sentences, batch {result['batch_size']}, {result['threads']} threads, load "
        f"average {result['load_average']['before']} -> {result['load_average']['after']}",
        "", "| | seconds per round |", "|---|---|",
        *(f"| {name} | {', '.join(map(str, values))} |" for name, values in result["seconds"].items()),
        "", f"transformers / ours: median {ratio['median']} (IQR {ratio['iqr'][0]}-{ratio['iqr'][1]}); the same class "
            f"for {result['same_class']:.4f} of the sentences"])


def main(args) -> None:
    if args.threads:
        torch.set_num_threads(args.threads)
    output_dir = Path(args.output_dir or "runs/bench/predict")
    output_dir.mkdir(parents=True, exist_ok=True)
    run_dir = prepared_run(args.run, output_dir, args.model)
    result = measure(run_dir, sst2_sentences(args.glue_dir, args.sentences), args.batch_size, args.repeats,
                     output_dir)
    print(json.dumps(result, indent=2) if args.as_json else format_report(result))
