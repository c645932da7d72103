"""`python -m course_lib.collect RUNS_DIR`: one table of dev-set results from the finished runs in a folder.

Reads every `metrics.json` under RUNS_DIR whose status is "complete" (a partial or failed run never enters),
groups the runs that differ only in their seed, and writes, atomically:

- `results.csv`: one row per run (its folder, its group's settings, seed, every dev metric as
  `dev_accuracy`, `dev_matched_accuracy`, ..., training time);
- `results.md`: one row per group: task, method, the other settings that differ between runs, the number
  of seeds, and mean ± sample standard deviation (ddof=1) over seeds of each dev metric, named as in
  metrics.json (`accuracy`, `f1`, `matthews_correlation`, `pearson`, `spearmanr`; MNLI's splits are
  `dev_matched` and `dev_mismatched`). A group of one seed shows its number without ±.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import statistics
import sys
from pathlib import Path

from course_lib.training.config import FinetuneConfig
from course_lib.errors import Parser, UsageError, report_errors
from course_lib.tasks.metrics import paired_t_test
from course_lib.experiments.reported import reported
from course_lib.repro import METRICS, atomic_write

METHOD_OPTIONS = ("ssa_", "asa_", "sparsegen_", "bernoulli_")  # a method's own settings, unused by vanilla
NOT_GROUPED = ("seed", "output_dir")  # runs that differ only in these are seeds of one group
# A run made before a FinetuneConfig field existed ran with what is now its default.
DEFAULTS = {f.name: f.default for f in dataclasses.fields(FinetuneConfig)}


def _dev_metrics(result: dict) -> dict[str, float]:
    """{'dev accuracy': 0.84, ...}: each dev split's metrics, as '<split> <metric>'."""
    return {f"{split} {name}": value for split, values in result.items()
            if split.startswith(("dev", "test")) and isinstance(values, dict) for name, value in values.items()}


def collect(runs_dir: str | Path) -> list[dict]:
    """One dict per complete run under runs_dir: run (its folder, relative), task, config, metrics, seconds."""
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        raise UsageError(f"runs folder {str(runs_dir)!r} does not exist or is not a folder")
    rows = []
    for path in sorted(runs_dir.rglob(METRICS)):
        try:
            result = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            print(f"warning: skipping {path}: {err}", file=sys.stderr)
            continue
        if result.get("status") != "complete" or result.get("kind") == "notebook":
            continue  # a notebook's own summary; the fine-tuning runs it made sit in folders below it
        if not isinstance(result.get("config"), dict) or "task" not in result:
            print(f"warning: skipping {path}: not a course_lib metrics.json (no config or task)", file=sys.stderr)
            continue
        rows.append({"run": path.parent.relative_to(runs_dir).as_posix(), "task": result["task"],
                     "config": {**DEFAULTS, **result["config"]}, "metrics": _dev_metrics(result),
                     "train_seconds": result.get("timing", {}).get("train_seconds")})
    return rows


def group_fields(rows: list[dict]) -> list[str]:
    """task, method, then every other config field whose value differs between the runs (but the seed)."""
    keys = sorted({k for row in rows for k in row["config"]} - {"task", "method", *NOT_GROUPED})
    varying = [k for k in keys if len({json.dumps(row["config"].get(k)) for row in rows}) > 1]
    return ["task", "method", *varying]


def _group_value(row: dict, field: str):
    return row["task"] if field == "task" else row["config"].get(field)


def summarize(rows: list[dict]) -> list[dict]:
    """One dict per group: its fields, seeds, n, and {metric: {'mean', 'std'}} (std is None for n = 1)."""
    fields = group_fields(rows)
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(json.dumps([_group_value(row, f) for f in fields]), []).append(row)
    summary = []
    for members in groups.values():
        seeds = {}
        for row in list(members):
            seed = row["config"].get("seed")
            if seed in seeds:  # the same settings and seed in two folders (two notebooks' vanilla runs, say):
                members.remove(row)  # a deterministic run, counted once
                continue
            seeds[seed] = row["run"]
        names = list(dict.fromkeys(name for row in members for name in row["metrics"]))
        metrics = {}
        for name in names:
            values = [row["metrics"][name] for row in members if name in row["metrics"]]
            metrics[name] = {"mean": statistics.fmean(values),
                             "std": statistics.stdev(values) if len(values) > 1 else None, "n": len(values)}
        summary.append({**{f: _group_value(members[0], f) for f in fields}, "seeds": sorted(seeds),
                        "n": len(members), "metrics": metrics})
    return sorted(summary, key=lambda g: [str(g[f]) for f in fields])


def paired_tests(rows: list[dict], metric: str, baseline: str = "vanilla") -> list[dict]:
    """Each method against the baseline on the same task and seeds: mean difference and a paired t-test.

    Pairs are runs with equal task and seed whose other settings may differ only in the method, so a
    seed's data order and initialisation are shared and the test sees the method's effect alone. The
    p-value is two-sided (`metrics.paired_t_test`); with fewer than 2 pairs, or all pairs equal, it is None.
    """
    def key(row):  # everything but the method and its own options
        shared = {k: v for k, v in row["config"].items()
                  if k not in ("method", "output_dir") and not k.startswith(METHOD_OPTIONS)}
        return row["task"], json.dumps(shared, sort_keys=True)
    base = {key(r): r["metrics"][metric] for r in rows
            if r["config"].get("method") == baseline and metric in r["metrics"]}
    pairs: dict[tuple, list[tuple[float, float]]] = {}
    for row in rows:
        method = row["config"].get("method")
        if method != baseline and metric in row["metrics"] and key(row) in base:
            options = ", ".join(f"{k}={v}" for k, v in sorted(row["config"].items())
                                if k.startswith(METHOD_OPTIONS) and v != DEFAULTS.get(k))
            method = f"{method} ({options})" if options else method  # ssa-co with paper labels is its own row
            pairs.setdefault((row["task"], method), []).append((row["metrics"][metric], base[key(row)]))
    results = []
    for (task, method), values in sorted(pairs.items()):
        ours, theirs = zip(*values)
        diff, p = paired_t_test(ours, theirs)
        results.append({"task": task, "method": method, "baseline": baseline, "metric": metric,
                        "pairs": len(values), "mean_difference": diff, "p_value": p})
    return results


def _metric_names(rows: list[dict]) -> list[str]:
    """'dev accuracy', 'dev f1', ..., then MNLI's 'dev_matched ...' and 'dev_mismatched ...' (' ' sorts before '_')."""
    return sorted({name for row in rows for name in row["metrics"]})


def to_csv(rows: list[dict]) -> str:
    fields, metrics = group_fields(rows), _metric_names(rows)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["run", *fields, "seed", *(m.replace(" ", "_") for m in metrics), "train_seconds"])
    order = sorted(rows, key=lambda r: [str(_group_value(r, f)) for f in fields] + [r["config"].get("seed", 0)])
    for row in order:
        writer.writerow([row["run"], *(_group_value(row, f) for f in fields), row["config"].get("seed"),
                         *(row["metrics"].get(m, "") for m in metrics), row["train_seconds"]])
    return out.getvalue()


def _mean_std(stats: dict | None) -> str:
    if stats is None:
        return ""
    return f"{stats['mean']:.4f}" if stats["std"] is None else f"{stats['mean']:.4f} ± {stats['std']:.4f}"


def to_markdown(rows: list[dict], runs_dir: str | Path) -> str:
    fields, metrics = group_fields(rows), _metric_names(rows)
    header = [*fields, "seeds", *metrics, "reported by the paper (BERT-base, not dev)"]
    lines = [f"# Dev-set results: {runs_dir}", "",
             f"{len(rows)} complete runs. Each cell is the mean ± sample standard deviation (ddof=1) over seeds "
             f"of a dev-set metric; one seed shows no ±. The last column is what the papers report for "
             f"BERT-base, in percent, on the GLUE test server or their own test split: a different model and "
             f"split, so compare methods within a column of this table, not across to it.", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for group in summarize(rows):
        cells = [str(group[f]) for f in fields] + [str(group["n"])]
        cells += [_mean_std(group["metrics"].get(m)) for m in metrics]
        cells.append(reported(str(group["method"]), str(group["task"])))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def lock_exclusive(fd: int, wait: bool = True) -> bool:
    """Lock the open file `fd` (POSIX flock, which a child given the descriptor shares); False only when `wait`
    is False and another process holds it.

    Where there is no flock the caller goes on unlocked (True): a filesystem without it (Lustre mounted without
    flock), or a platform without fcntl (Windows). What that gives up: two sweep shards may then run the same
    run folder at once, and two that finish together may each replace results.csv/.md, so the last writer's
    tables, read before the other's run completed, can lack that run until the next collect. Every file is
    still written whole (atomic_write).
    """
    try:
        import fcntl  # here, not at the top: POSIX only, and notebook 06 imports this module on any platform
    except ImportError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    except OSError:  # a filesystem without flock
        return True
    return True


def write_results(runs_dir: str | Path, out: str | Path | None = None) -> tuple[Path, Path, list[dict]]:
    """Write <out>.csv and <out>.md (default RUNS_DIR/results); return both paths and the rows.

    Several sweep shards may finish at once: `.<out>.lock` is held while the two files are replaced
    (`lock_exclusive`).
    """
    rows = collect(runs_dir)
    out = Path(out) if out is not None else Path(runs_dir) / "results"
    csv_path, md_path = out.with_name(out.name + ".csv"), out.with_name(out.name + ".md")
    csv_text, md_text = to_csv(rows), to_markdown(rows, runs_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(out.with_name(f".{out.name}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        lock_exclusive(fd)
        for path in (csv_path, md_path):  # a write that a kill interrupted leaves '.results.md.XXXX.tmp'
            for stale in path.parent.glob(f".{path.name}.*.tmp"):
                stale.unlink(missing_ok=True)
        atomic_write(csv_path, lambda f: f.write(csv_text.encode()))
        atomic_write(md_path, lambda f: f.write(md_text.encode()))
    finally:
        os.close(fd)
    return csv_path, md_path, rows


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m course_lib.collect", description=__doc__.splitlines()[0])
    parser.add_argument("runs_dir", metavar="RUNS_DIR", help="folder searched for metrics.json files")
    parser.add_argument("--out", default=None,
                        help="path of the tables without suffix: writes OUT.csv and OUT.md (default RUNS_DIR/results)")

    def body() -> int:
        args = parser.parse_strict(argv)
        csv_path, md_path, rows = write_results(args.runs_dir, args.out)
        print(md_path.read_text(encoding="utf-8"))
        print(f"wrote {md_path} and {csv_path} ({len(rows)} complete runs)")
        return 0
    return report_errors(body, "nothing was written")
