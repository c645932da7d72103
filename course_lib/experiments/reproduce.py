"""`python -m course_lib bench reproduce`: every method against vanilla on real GLUE tasks, on a CPU budget.

The grid (`ci/grids/cpu_reproduction.yaml` by default) is run by `course_lib.experiments.sweep`, so an interrupted
reproduction resumes where it stopped and `--shard I/N` splits it across machines. The report,
`results/cpu_reproduction.md`, gives per task each method's dev metric (mean ± std over seeds), its mean
difference to vanilla over the same seeds with a paired t-test (`collect.paired_tests`), and a verdict
that says plainly whether the gain the paper reports shows at this scale. It starts with the command that
made it.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import statistics
from pathlib import Path

from course_lib.experiments import collect
from course_lib.tasks.glue import get_task
from course_lib.experiments.reported import REPORTED
from course_lib.repro import atomic_write
from course_lib.experiments.sweep import load_grid, sweep

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_GRID = ROOT / "ci" / "grids" / "cpu_reproduction.yaml"
DEFAULT_REPORT = Path("results") / "cpu_reproduction.md"
SIGNIFICANT = 0.05  # two-sided p below this counts as a difference beyond seed noise
CHANCE_MARGIN = 0.01  # a baseline within this of chance level has learnt nothing worth comparing


def _shown(path: str | Path) -> str:
    """A path as the reader should type it: relative to the repository when it lies inside."""
    path = Path(path).resolve()
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.as_posix()


def primary_metric(task: str) -> str:
    """The metric a task's verdict is judged on: the first GLUE metric (STS-B: Pearson, as Kou et al.)."""
    return f"dev {get_task(task).metrics[0]}"


def paper_gain(method: str, task: str, metric: str) -> str:
    """The paper's own method - vanilla difference in points on this task and metric, or '' if not reported."""
    name = metric.split(" ", 1)[1]
    for claim in REPORTED.get(("finetune", method, task), []):
        base = [r for r in REPORTED.get(("finetune", "vanilla", task), [])
                if r.source == claim.source and r.metric == name]
        if claim.metric == name and base:
            return f"{claim.value - base[0].value:+.1f} ({claim.source})"
    return ""


def chance_level(rows: list[dict], metric: str) -> float | None:
    """What a model that learnt nothing scores on these runs' dev sets: the majority class's share for accuracy
    (mean over the runs' seeds, each seed's own dev sample), 0 for MCC and the correlations.
    None when the dev data cannot be read here (then no run is called chance-level)."""
    name = metric.split(" ", 1)[1]
    if name != "accuracy":
        return 0.0
    from collections import Counter

    from course_lib.tasks import glue

    shares = []
    for config in {json.dumps(r["config"], sort_keys=True): r["config"] for r in rows}.values():
        try:
            dev = glue.subsample(glue.load_split(config["task"], "dev", config.get("glue_dir")),
                                 config.get("max_eval_samples"), config.get("seed", 0))
        except Exception:  # no local data and no network: say nothing rather than guess
            return None
        shares.append(max(Counter(ex.label for ex in dev).values()) / len(dev))
    return statistics.fmean(shares) if shares else None


def holm_rejections(p_values: list[float], alpha: float = SIGNIFICANT) -> int:
    """How many tests stay significant under Holm's step-down correction: the k-th smallest p (0-based) must be
    below alpha / (m - k), and the first one that is not stops the count."""
    m = len(p_values)
    for k, p in enumerate(sorted(p_values)):
        if p >= alpha / (m - k):
            return k
    return m


def verdict(diff: float | None, p: float | None, claimed: str, pairs: int = 0) -> str:
    """One plain sentence on what the paired test says, set against what the paper claims."""
    if diff is None or (p is None and pairs < 2):
        return "not tested (fewer than 2 paired seeds)"
    if p is None:  # every pair equal (metrics.paired_t_test): no spread to test against
        return "equal to vanilla on every seed" if diff == 0 else f"{diff:+.4f} on every seed (no spread to test)"
    if p < SIGNIFICANT:
        said = "better than vanilla" if diff > 0 else "worse than vanilla"
        return said + (", as the paper claims" if claimed.startswith("+") and diff > 0 else
                       "; the paper's gain does not show" if claimed.startswith("+") else "")
    return ("no difference beyond seed noise" +
            ("; the paper's gain does not show at this scale" if claimed.startswith("+") else ""))


def report(runs_dir: str | Path, command: str, grid: str | Path, baseline: str = "vanilla") -> str:
    """The markdown report of all complete runs under runs_dir."""
    rows = collect.collect(runs_dir)
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    seconds = sum(r["train_seconds"] or 0 for r in rows)
    lines = ["# CPU reproduction: every method against vanilla on GLUE dev sets", "",
             f"Made by `{command}` on {datetime.date.today().isoformat()} ({platform.machine()}, "
             f"{os.cpu_count()} CPUs) from the grid `{_shown(grid)}`: {len(rows)} complete runs, "
             f"{seconds / 3600:.1f} hours of training in all.", "",
             "Each cell is a dev-set metric, mean ± sample std over seeds. Δ is the method's mean minus "
             "vanilla's over the same seeds (equal data order and initialisation), p the two-sided paired "
             f"t-test; 'beyond seed noise' means p < {SIGNIFICANT}. The paper's Δ is its own method minus "
             "its own vanilla row (BERT-base, GLUE test server or test split): a claim about direction and "
             "size, not a number to match with a 6-layer MiniLM on a CPU budget.", ""]
    p_values: list[float] = []  # the tests on tasks the baseline learnt, for the multiple-comparison note
    for task in tasks:
        metric = primary_metric(task)
        mine = [r for r in rows if r["task"] == task]
        groups = {g["method"]: g for g in collect.summarize(mine)}
        tests = {t["method"]: t for t in collect.paired_tests(mine, metric, baseline)}
        lines += [f"## {task} ({metric})", ""]
        chance = chance_level([r for r in mine if r["config"].get("method") == baseline], metric)
        base_stats = groups.get(baseline, {}).get("metrics", {}).get(metric)
        at_chance = chance is not None and base_stats is not None and base_stats["mean"] <= chance + CHANCE_MARGIN
        if at_chance:
            lines += [f"**{baseline} scores {base_stats['mean']:.4f}, chance level here is {chance:.4f}: this budget "
                      f"does not learn {task}, so no comparison of methods on it is informative.**", ""]
        lines += [f"| method | seeds | {metric} | Δ vs {baseline} | p | paper's Δ | verdict |",
                  "|---|---|---|---|---|---|---|"]
        for method, group in groups.items():
            stats = group["metrics"].get(metric)
            test = tests.get(method, {})
            diff, p = test.get("mean_difference"), test.get("p_value")
            claimed = "" if method == baseline else paper_gain(method, task, metric)
            cells = [method, str(group["n"]), collect._mean_std(stats),
                     "" if diff is None else f"{diff:+.4f}", "" if p is None else f"{p:.3f}", claimed,
                     "baseline" if method == baseline else verdict(diff, p, claimed, test.get("pairs", 0))]
            if p is not None and not at_chance:
                p_values.append(p)
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    if p_values:
        m, holm = len(p_values), holm_rejections(p_values)
        lines += ["## Many tests at once", "",
                  f"On the tasks the baseline learnt there are {m} paired tests; at p < {SIGNIFICANT} about "
                  f"{m * SIGNIFICANT:.1f} of them would come out 'significant' by chance alone. "
                  f"{sum(p < SIGNIFICANT for p in p_values)} did; after Holm's correction for {m} tests, "
                  f"{holm} remain.", ""]
    return "\n".join(lines)


def reproduce(grid: str | Path = DEFAULT_GRID, output_dir: str | Path | None = None,
              out: str | Path = DEFAULT_REPORT, shard: tuple[int, int] = (0, 1), command: str | None = None) -> int:
    """Run (or resume) the grid, then write the report from every complete run; return the sweep's exit code."""
    output_dir = Path(output_dir) if output_dir is not None else Path("runs/sweep") / Path(grid).stem
    load_grid(grid, output_dir)  # a bad grid fails here, before anything runs
    code = sweep(grid, output_dir, shard)
    text = report(output_dir, command or "python -m course_lib bench reproduce", grid)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, lambda f: f.write(text.encode()))
    print(text)
    print(f"wrote {out}")
    return code


def main(args) -> int:
    """`bench reproduce` from the parsed bench options."""
    from course_lib.experiments.sweep import parse_shard

    command = "python -m course_lib bench reproduce" + "".join(
        f" {flag} {shlex.quote(str(value))}" for flag, value in
        (("--grid", args.grid), ("--output-dir", args.output_dir), ("--report", args.report),
         ("--shard", args.shard)) if value is not None)
    return reproduce(args.grid or DEFAULT_GRID, args.output_dir, args.report or DEFAULT_REPORT,
                     parse_shard(args.shard or "0/1"), command)
