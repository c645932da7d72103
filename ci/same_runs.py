"""Did a refactor change what training computes? Tiny fixed-seed runs of every method and kind, made before and
after the change, must give the same metrics.json (every score and logged loss, to the last digit).

    .venv/bin/python ci/same_runs.py run OUT [NAME ...]   # about 4 minutes on 2 cores: 18 tiny runs (or those named)
    .venv/bin/python ci/same_runs.py compare BEFORE AFTER [NAME ...]

`compare` leaves out timings and the config (whose keys may move in a refactor; it prints the keys that differ)
and exits 1 at the first run whose results differ. Issue 41's options refactor was checked this way.

Both sides must come from one machine and one CPU path: another CPU (AVX2 against AVX-512, or
ATEN_CPU_CAPABILITY set differently) rounds the same computation differently in the last bit, and training
carries that into every later digit. `run` writes the path it ran on to OUT/cpu.json; `compare` refuses two
sides whose paths differ (exit 2), rather than reading a rounding difference as a change of the code.
"""
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

SMALL = ["--max-train-samples", "48", "--max-eval-samples", "48", "--epochs", "2", "--batch-size", "16",
         "--max-len", "48"]
RUNS = {  # folder: command line after `python -m course_lib`
    **{f"sst2-{m}": ["finetune", "--task", "sst2", "--method", m, *SMALL]
       for m in ("vanilla", "ssaf", "asa", "bernoulli-mask", "ssa-co", "ssa-hybrid", "bert-mask", "mean-pool")},
    **{f"stsb-{m}": ["finetune", "--task", "stsb", "--method", m, *SMALL]
       for m in ("asa", "bernoulli-mask", "ssa-hybrid")},
    "sst2-asa-opts": ["finetune", "--task", "sst2", "--method", "asa", "--asa-tau", "0.5", "--asa-clip-scope", "all",
                      *SMALL],
    "wnut-asa": ["finetune", "--task", "wnut17", "--method", "asa", *SMALL],
    "mt": ["multitask", "--tasks", "sst2,stsb", "--ssa", "stsb", *SMALL],
    "ag": ["pretrain", "--method", "ag", "--max-steps", "20", "--eval-every", "10"],
    "squad-opts": ["finetune", "--task", "squad_articles", *SMALL, "--max-len", "64", "--doc-stride", "24",
                   "--max-query-length", "16"],
    "custom-sentence": ["finetune", "--task", "custom", "--task-type", "classification", "--train-file",
                        "data/glue/SST-2/train.tsv", "--validation-file", "data/glue/SST-2/dev.tsv",
                        "--text-columns", "sentence", "--label-column", "label", "--labels", "1,0", *SMALL],
    "custom-tagging": ["finetune", "--task", "custom", "--task-type", "tagging", "--train-file",
                       "data/wnut17/wnut17train.conll", "--validation-file", "data/wnut17/emerging.dev.conll",
                       *SMALL],
}
TIMINGS = ("seconds", "time", "elapsed", "host", "started", "finished", "duration", "per_second", "throughput")


def cpu_path() -> dict:
    """What decides the last bits of these runs besides the code: torch's build and the CPU kernels it picks."""
    import torch

    return {"torch": torch.__version__, "machine": platform.machine(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability()}


def run(out: Path, only: list[str]) -> int:
    env = {**os.environ, "CI": "true", "TQDM_DISABLE": "1"}
    out.mkdir(parents=True, exist_ok=True)
    (out / "cpu.json").write_text(json.dumps(cpu_path()) + "\n")
    for name, args in RUNS.items():
        if only and name not in only:
            continue
        done = subprocess.run([sys.executable, "-m", "course_lib", *args, "--output-dir", str(out / name)], env=env,
                              capture_output=True, text=True)
        print(name, "ok" if done.returncode == 0 else f"FAILED: {done.stderr.strip().splitlines()[-1:]}")
    return 0


def results(value):
    """metrics.json without what may change while the computation does not: timings, folders, the config."""
    if isinstance(value, dict):
        return {k: results(v) for k, v in value.items()
                if not any(t in k for t in TIMINGS) and k not in ("config", "output_dir", "corpus", "model_dir")}
    return [results(v) for v in value] if isinstance(value, list) else value


def compare(before: Path, after: Path, only: list[str]) -> int:
    paths = [json.loads((side / "cpu.json").read_text()) if (side / "cpu.json").is_file() else None
             for side in (before, after)]
    if None not in paths and paths[0] != paths[1]:
        print(f"{before} ran on {paths[0]}, {after} on {paths[1]}: bit-equal results are expected on one CPU path "
              "only; run both sides on one machine", file=sys.stderr)
        return 2
    for name in RUNS:
        if only and name not in only:
            continue
        old, new = (json.loads((side / name / "metrics.json").read_text()) for side in (before, after))
        keys = sorted(set(old["config"]) ^ set(new["config"]))
        changed = sorted(k for k in set(old["config"]) & set(new["config"])
                         if old["config"][k] != new["config"][k] and k != "output_dir")
        if results(old) != results(new):
            print(f"{name}: the results differ")
            return 1
        print(f"{name}: same results; config keys in one side only: {keys or 'none'}; values changed: "
              f"{changed or 'none'}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "run":
        sys.exit(run(Path(sys.argv[2]), sys.argv[3:]))
    if len(sys.argv) >= 4 and sys.argv[1] == "compare":
        sys.exit(compare(Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4:]))
    print(__doc__, file=sys.stderr)
    sys.exit(2)
