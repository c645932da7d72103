"""`sweep --launcher slurm` on a real one-node Slurm (started by `ci/slurm_cluster.sh`), as CI checks it:

    source <(bash ci/slurm_cluster.sh start)
    .venv/bin/python ci/slurm_check.py [--local DIR] [--work DIR]

1. The smoke grid (ci/grids/glue_smoke.yaml, 4 runs) as one job array, waited for: every run done and the results
   table (timings aside) the same as the local sweep's in DIR. Without --local the local sweep runs here first, so
   the two wall times are measured side by side (results/cluster.md).
2. One run requeued mid-way (ci/grids/slurm_requeue.yaml): `scontrol requeue` once its first epoch is written; the
   requeued task resumes it, and its metrics.json must equal, timing aside, the same run made locally in one go.

Exits 1 with one line at the first difference.
"""
import argparse
import csv
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SMOKE, REQUEUE = ROOT / "ci/grids/glue_smoke.yaml", ROOT / "ci/grids/slurm_requeue.yaml"


def sweep(*args: str) -> float:
    """`python -m course_lib sweep ARGS`; its wall seconds; exit 1 if it fails."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "course_lib", "sweep", *args], cwd=ROOT)
    if done.returncode != 0:
        sys.exit(f"slurm_check: sweep {' '.join(args)} exited {done.returncode}")
    return time.perf_counter() - started


def table(folder: Path) -> list[dict]:
    """results.csv without its timings."""
    with open(folder / "results.csv", newline="") as f:
        return [{k: v for k, v in row.items() if not k.endswith("_seconds")} for row in csv.DictReader(f)]


def metrics(folder: Path) -> dict:
    """The only run's metrics.json, without its timing and its folder."""
    result = json.loads(next(folder.glob("task=*/metrics.json")).read_text())
    result.pop("timing", None)
    result["config"].pop("output_dir", None)
    return result


def wait(what: str, ready, limit: float = 300) -> None:
    started = time.monotonic()
    while not ready():
        if time.monotonic() - started > limit:
            sys.exit(f"slurm_check: {what} did not happen within {limit:.0f} s")
        time.sleep(1)


def queue_state(job: str) -> str:
    """The task's state in Slurm's queue (PENDING, RUNNING, ...), '' once it has left it."""
    done = subprocess.run(["squeue", "-h", "-r", "-j", job, "-o", "%T"], capture_output=True, text=True)
    return done.stdout.strip()


def requeue_mid_run(work: Path) -> None:
    """Submit the requeue grid, requeue its task once the first epoch is written, let the requeued task finish,
    and compare with the same run made locally in one go."""
    sweep(str(REQUEUE), "--output-dir", str(work / "requeue_local"))
    out = work / "requeue_slurm"
    sweep(str(REQUEUE), "--output-dir", str(out), "--launcher", "slurm")
    folder = next(out.glob("task=*"))

    def read(name: str) -> dict:
        try:
            return json.loads((folder / name).read_text())
        except (OSError, ValueError):
            return {}
    wait("the first epoch's metrics", lambda: read("metrics.json").get("status") == "running")
    job = read("run.json")["job_id"]
    subprocess.run(["scontrol", "requeue", job], check=True)
    print(f"slurm_check: requeued {job} after its first epoch", flush=True)
    wait("the requeued task's return to the queue", lambda: queue_state(job) == "PENDING")
    # Slurm holds a requeued job back a couple of minutes (its begin time); an administrator's nudge skips that
    subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], capture_output=True)
    wait("the requeued run's end", lambda: read("metrics.json").get("status") == "complete", limit=600)
    log = (folder / "log.txt").read_text()
    if "resuming" not in log:
        sys.exit(f"slurm_check: the requeued task did not resume from the checkpoint (log: {folder / 'log.txt'})")
    if metrics(out) != metrics(work / "requeue_local"):
        sys.exit("slurm_check: the requeued run's metrics.json differs from the uninterrupted run's")
    print("slurm_check: the requeued run resumed and its metrics equal the uninterrupted run's", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local", type=Path, help="a local sweep of ci/grids/glue_smoke.yaml (default: run it now)")
    parser.add_argument("--work", type=Path, default=ROOT / "runs/slurm_check")
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)  # runs left by an earlier check would be skipped, not run
    local_seconds = None
    if args.local is None:
        args.local = args.work / "smoke_local"
        local_seconds = sweep(str(SMOKE), "--output-dir", str(args.local))
    slurm_seconds = sweep(str(SMOKE), "--output-dir", str(args.work / "smoke_slurm"), "--launcher", "slurm", "--wait")
    if table(args.work / "smoke_slurm") != table(args.local):
        sys.exit(f"slurm_check: the Slurm sweep's table differs from the local one's ({args.local / 'results.csv'})")
    print(f"slurm_check: the smoke grid through Slurm: every run done, the local sweep's table; {slurm_seconds:.0f} s"
          + (f" against {local_seconds:.0f} s locally ({slurm_seconds / local_seconds:.2f}x)" if local_seconds else ""),
          flush=True)
    requeue_mid_run(args.work)


if __name__ == "__main__":
    main()
