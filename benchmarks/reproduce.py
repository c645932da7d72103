"""`python -m benchmarks reproduce`: every method against vanilla on real tasks, on a CPU budget.

The grid (`ci/grids/cpu_reproduction.yaml` by default) is run by `course_lib.lab.sweep`, so an interrupted
reproduction resumes where it stopped and `--shard I/N` splits it across machines. As each run completes its
metrics.json (only that file) is copied to the results archive, `results/runs/<grid name>/<run folder>/` (beside
the report; `--archive DIR` elsewhere), which is committed, so the runs outlive their folders and sessions;
`--from-archive` rebuilds the report from it without running anything.

The report, `results/cpu_reproduction.md`, gives per task whether vanilla reaches its target (`TARGETS`) or
sits at chance level, the seed noise of the paired differences and the smallest difference these seeds can
detect (`significance.detectable_difference`), and each method's dev metric (mean ± std over seeds), its mean
difference to vanilla over the same seeds with a paired t-test (`collect.paired_tests`), that p after Holm's
correction across the report's tests, and a verdict on the Holm-adjusted p that says plainly whether the gain
the paper reports shows at this scale, or is below what the seeds can detect. `mean-pool` is a control
(`CONTROLS`). It starts with the commands that run the grid and rebuild the report. Any registered task works
(`ci/grids/cpu_reproduction_families.yaml` runs SQuAD by article, WNUT-17 and DREAM the same way).
"""
from __future__ import annotations

import datetime
import json
import math
import os
import platform
import shlex
import statistics
from pathlib import Path

import pandas as pd

from course_lib.lab import collect
from course_lib.lab.records import percent_scale
from course_lib.lab.reported import REPORTED
from course_lib.lab.sweep import load_grid, sweep
from course_lib.runtime.errors import UsageError
from course_lib.runtime.repro import atomic_write
from course_lib.lab.significance import detectable_difference, holm_adjusted, seeds_to_detect
from course_lib.lab.tables import grouped, markdown, mean_sd
from course_lib.tasks.registry import get_task

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_GRID = ROOT / "ci" / "grids" / "cpu_reproduction.yaml"
DEFAULT_REPORT = Path("results") / "cpu_reproduction.md"
SIGNIFICANT = 0.05  # two-sided p below this counts as a difference beyond seed noise
MOST_SEEDS = 1000  # past this many seeds a claim is called out of reach
CHANCE_MARGIN = 0.01  # a baseline within this of chance level has learnt nothing worth comparing
POWER = 0.8  # the power at which the report states the smallest detectable difference
# What vanilla must reach on a task (dev metric, mean over seeds) for the budget to count as one where it learns
# the task: the targets set in the project's issue 'budgets where vanilla clearly learns'.
# SQuAD (F1, 0-100), WNUT-17 (entity F1) and DREAM: well above their trivial baselines (the paragraph's first
# sentence scores F1 11.3, no entity 0, a guess among DREAM's 3 choices 1/3), below what the budget reached on one
# or two seeds (results/squad.md, results/families.md).
TARGETS = {"sst2": 0.83, "cola": 0.25, "rte": 0.58, "stsb": 0.80, "squad_articles": 30.0, "wnut17": 0.40,
           "dream": 0.40}
# The metric a task is judged on where it is not the preset's first: SQuAD's F1 (exact match moves in whole
# answers, so it is the noisier of the two on a few thousand questions).
JUDGED_ON = {"squad": "f1", "squad_v2": "f1", "squad_articles": "f1"}
# The papers' rows a preset is compared with where its name differs: SQuAD v1.1 split by article is SQuAD v1.1.
PAPER_TASK = {"squad_articles": "squad"}
# Methods that are no paper's method but a check on one: tested like the others, labelled in the verdict.
CONTROLS = {"mean-pool": "control: vanilla with a mean-pooling head"}


def _as_typed(path: str | Path) -> str:
    """A path as the reader should type it: relative to the repository when it lies inside."""
    path = Path(path).resolve()
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.as_posix()


def primary_metric(task: str) -> str:
    """The metric a task's verdict is judged on: the preset's first (STS-B: Pearson, as Kou et al.), unless
    `JUDGED_ON` names another."""
    return f"dev {JUDGED_ON.get(task, get_task(task).metrics[0])}"


def points_per_unit(task: str) -> float:
    """How many of the papers' points one unit of the task's metric is: 100, or 1 for a preset whose scores are
    on a 0-100 scale already (SQuAD's official script)."""
    return float(percent_scale(task, primary_metric(task)) or 100)


def paper_delta(method: str, task: str, metric: str) -> tuple[float, str, str] | None:
    """The paper's own method - vanilla difference in points (x100 of our metric) on this task, its source and
    the metric it is on: ours where the paper reports it, else another the paper reports for the task (Wu et
    al. give STS-B in Spearman's rho only, where Kou et al. and the report use Pearson's r); None if no paper
    reports both rows."""
    name, task = metric.split(" ", 1)[1], PAPER_TASK.get(task, task)
    claims = sorted(REPORTED.get(("finetune", method, task), []), key=lambda claim: claim.metric != name)
    for claim in claims:
        base = [r for r in REPORTED.get(("finetune", "vanilla", task), [])
                if r.source == claim.source and r.metric == claim.metric]
        if base:
            return round(claim.value - base[0].value, 10), claim.source, claim.metric
    return None


def _dev_examples(config: dict) -> list:
    """The first dev split the run with this metrics.json config scored, read as it read it."""
    from course_lib.tasks.registry import get_family, run_task
    from course_lib.training.config import FinetuneConfig
    from course_lib.training.finetune import split_examples

    cfg = FinetuneConfig.from_dict(config)
    task = run_task(cfg)
    return split_examples(cfg, task, get_family(task.family), task.dev_splits[0])


def chance_level(rows: list[dict], metric: str) -> float | None:
    """What a model that learnt nothing scores on these runs' dev sets: for accuracy the share of the most
    common label (a class, or a choice's position; mean over the runs' seeds, each seed's own dev sample), 0 for
    MCC, the correlations and the F1s (no entity, an empty answer). None when the dev data cannot be read here
    (then no run is called chance-level)."""
    name = metric.split(" ", 1)[1]
    if name != "accuracy":
        return 0.0
    from collections import Counter

    shares = []
    for config in {json.dumps(r["config"], sort_keys=True): r["config"] for r in rows}.values():
        try:
            dev = _dev_examples(config)
        except Exception:  # no local data and no network: say nothing rather than guess
            return None
        shares.append(max(Counter(ex.label for ex in dev).values()) / len(dev))
    return statistics.fmean(shares) if shares else None


def holm_rejections(p_values: list[float], alpha: float = SIGNIFICANT) -> int:
    """How many tests stay significant under Holm's step-down correction: those whose Holm-adjusted p
    (`significance.holm_adjusted`) is below alpha."""
    return sum(p < alpha for p in holm_adjusted(p_values))


def paired_differences(rows: list[dict], metric: str, baseline: str = "vanilla") -> dict[str, list[float]]:
    """Each method's differences (method - baseline) on the metric over the pairs `collect.paired_tests` forms
    (`collect.paired_runs`): runs of one task and seed whose other settings differ only in the method."""
    pairs = collect.paired_runs(rows, metric, baseline)
    return {label: (pair["value"] - pair["base"]).tolist() for label, pair in pairs.groupby("label", sort=False)}


def seed_noise(differences: dict[str, list[float]]) -> tuple[float | None, int, int]:
    """The seed noise of a task's paired differences: the root mean of each method's sample variance of its
    differences (methods with 2 or more pairs), the most pairs among them (the task's seeds once its grid is
    complete) and how many methods; (None, 0, 0) when no method has 2 pairs. Pooled because 3 seeds give each
    method's own sd a wide uncertainty."""
    tested = [d for d in differences.values() if len(d) >= 2]
    if not tested:
        return None, 0, 0
    return math.sqrt(statistics.fmean(statistics.variance(d) for d in tested)), max(map(len, tested)), len(tested)


def verdict(diff: float | None, p: float | None, claimed: float | None = None, pairs: int = 0,
            detectable: float | None = None, seeds: int = 0, scale: float = 100.0, needed: int | None = None) -> str:
    """One plain sentence on what the paired test says (p: Holm-adjusted), set against what the paper claims
    (claimed: its Δ in points) and what these seeds can detect (detectable: in the metric's units, of which
    one is `scale` points; needed: how many seeds would detect the claim, `significance.seeds_to_detect`)."""
    if diff is None or (p is None and pairs < 2):
        return "not tested (fewer than 2 paired seeds)"
    if p is None:  # every pair equal (significance.paired_t_test): no spread to test against
        return "equal to vanilla on every seed" if diff == 0 else f"{diff:+.4f} on every seed (no spread to test)"
    gain = claimed is not None and claimed > 0
    below = "" if claimed is None or detectable is None or abs(claimed) >= scale * detectable else \
        f"the paper's {claimed:+.1f} is below what {seeds} seeds can detect here (±{scale * detectable:.1f})" + \
        ("" if needed is None else f"; about {needed} seeds would detect it" if needed <= MOST_SEEDS else
         f"; more than {MOST_SEEDS} seeds would be needed")
    if p < SIGNIFICANT:
        said = "better than vanilla" if diff > 0 else "worse than vanilla"
        if gain:
            said += ("; the paper's gain does not show" if diff < 0 else
                     ", in the paper's direction" if below else ", as the paper claims")
        return said + (f"; {below}" if below else "")
    if below:
        return f"no difference beyond seed noise; {below}"
    return "no difference beyond seed noise" + ("; the paper's gain does not show at this scale" if gain else "")


def method_groups(rows: list[dict]) -> dict[str, dict]:
    """One task's runs summarised by method label (`collect._method_label`: the method with its own options where
    they are off their defaults), the key its paired test has too, so a method run with a task's own option (ASA
    at tau 0.5 on WNUT-17) is set against the baseline in its row."""
    groups = {}
    for label, members in grouped(rows, collect._method_label).items():
        summary = collect.summarize(members)
        if len(summary) != 1:
            raise UsageError(f"{members[0]['task']}: the runs of {label} differ in "
                             f"{', '.join(collect.group_fields(members)[2:])}; one report row needs one setting")
        groups[label] = summary[0]
    return groups


def analyse(task: str, rows: list[dict], baseline: str = "vanilla") -> dict:
    """One task's numbers: its metric, groups by method, paired tests, chance level, whether the baseline is at
    chance, the seed noise and the smallest difference detectable with POWER at p < SIGNIFICANT."""
    metric = primary_metric(task)
    mine = [r for r in rows if r["task"] == task]
    chance = chance_level([r for r in mine if r["config"].get("method") == baseline], metric)
    groups = method_groups(mine)
    base = groups.get(baseline, {}).get("metrics", {}).get(metric)
    sd, seeds, methods = seed_noise(paired_differences(mine, metric, baseline))
    claims = {label: paper_delta(group["method"], task, metric) for label, group in groups.items() if label != baseline}
    return {"task": task, "metric": metric, "rows": mine, "groups": groups, "claims": claims, "chance": chance,
            "base": base,
            "tests": {t["method"]: t for t in collect.paired_tests(mine, metric, baseline)},
            "at_chance": chance is not None and base is not None and base["mean"] <= chance + CHANCE_MARGIN,
            "sd": sd, "seeds": seeds, "methods": methods, "scale": points_per_unit(task),
            "detectable": detectable_difference(sd, seeds, SIGNIFICANT, POWER)}


def holm_family(tasks: list[dict]) -> list[dict]:
    """Holm's correction across every test on the tasks the baseline learnt (not at chance level): sets each
    such test's `p_holm` (`significance.holm_adjusted`; elsewhere None) and returns the family's tests."""
    family = [t for a in tasks if not a["at_chance"] for t in a["tests"].values() if t["p_value"] is not None]
    for a in tasks:
        for test in a["tests"].values():
            test["p_holm"] = None
    for test, adjusted in zip(family, holm_adjusted([t["p_value"] for t in family])):
        test["p_holm"] = adjusted
    return family


def _planned(grid: str | Path) -> list | None:
    """The configs of the grid file's runs, read once per report; None where the file cannot be read here (a
    report rebuilt elsewhere)."""
    try:
        return [run.config for run in load_grid(grid, Path("runs"))]
    except UsageError:
        return None


def _runs_of(rows: list[dict], planned: list | None) -> str:
    """'13 complete runs', with ' of the grid's 160 (the rest to come: about 20 hours ...)' while the grid file
    lists more. The hours left are each missing run's task and method at the mean training time of its complete
    runs (else its task's), so they are only as good as the pace the machine kept."""
    runs = f"{len(rows)} complete run{'s' if len(rows) != 1 else ''}"
    if planned is None:  # no grid file here: the count alone
        return runs
    done = {(r["task"], r["method"], r["config"].get("seed")) for r in rows}
    missing = [(c.task, c.method) for c in planned if (c.task, c.method, c.seed) not in done]
    if not missing:
        return runs
    pace = pd.DataFrame([(r["task"], r["method"], r["train_seconds"] or 0.0) for r in rows],
                        columns=["task", "method", "seconds"])
    by_method, by_task = pace.groupby(["task", "method"])["seconds"].mean(), pace.groupby("task")["seconds"].mean()
    known = [by_method[key] if key in by_method else by_task[key[0]] for key in missing if key[0] in by_task]
    left = f"about {sum(known) / 3600:.1f} hours of training at the complete runs' pace" if known else ""
    unpaced = len(missing) - len(known)
    if unpaced:
        left += f"{', plus ' if known else ''}{unpaced} runs of tasks with none complete yet"
    return runs + f" of the grid's {len(planned)} (the rest to come: {left})"


def _header(rows: list[dict], command: str, grid: str | Path, planned: list | None, rebuild: str | None,
            archive: Path | None, baseline: str) -> list[str]:
    seconds = sum(r["train_seconds"] or 0 for r in rows)
    again = "" if rebuild is None else (f" Rebuild this report from the archive `{_as_typed(archive)}` (each run's "
                                        f"metrics.json), running nothing: `{rebuild}`.")
    lines = ["# CPU reproduction: every method against vanilla on dev sets", "",
             f"Written on {datetime.date.today().isoformat()} ({platform.machine()}, {os.cpu_count()} CPUs) from "
             f"the grid `{_as_typed(grid)}`: {_runs_of(rows, planned)}, {seconds / 3600:.1f} hours of training in "
             f"all. Run or resume the grid with `{command}` (a fresh clone too: a run the archive holds is "
             f"not trained again).{again}", "",
             f"Each cell is a dev-set metric, mean ± sample std over seeds. Δ is the method's mean minus {baseline}'s "
             "over the same seeds (equal data order and initialisation), p the two-sided paired t-test and p (Holm) "
             "that p after Holm's correction across every test on the tasks the baseline learnt (above chance "
             f"level); the verdict reads p (Holm): 'beyond seed noise' means p (Holm) < {SIGNIFICANT}. The paper's Δ "
             f"is its own method minus its own {baseline} row in points (x100 of our metric, or the metric itself "
             "where it is 0-100 already, as SQuAD's; BERT-base, GLUE test server or test split): a claim about "
             "direction and size, not a number to match with a 6-layer MiniLM on a CPU budget. Where a paper "
             "gives a task on another metric only, the cell names it and a line under the table tests the method "
             "on that metric too.", "",
             f"'detectable Δ ({POWER:.0%} power)' is the smallest true mean difference a paired t-test at p < "
             f"{SIGNIFICANT} over these seeds finds {POWER:.0%} of the time, for the task's seed noise: the sd of "
             "the paired differences pooled over the task's methods (the root mean of each method's sample "
             "variance of its differences), so a task's rows differ in it only by their number of seeds; pooled "
             "rather than each method's own because a few seeds leave one method's sd very uncertain. It is "
             "given in the metric and in points, to set beside the paper's Δ; Holm's correction asks for a "
             "smaller p still, so what these seeds can detect after it is larger. Where the paper's Δ is below it, "
             "the verdict says about how many seeds would detect the paper's Δ at the same noise. Each task's "
             "target is what vanilla should reach where the budget clearly learns the task (mean over seeds)."]
    if any(r["method"] in CONTROLS for r in rows):
        lines += ["", "`mean-pool` is a control, not a paper's method: vanilla with the classifier on the mean of "
                  "the token vectors instead of [CLS]. The packaged MiniLM was trained as a sentence encoder with "
                  "mean pooling, so a method whose head reads every token, like SSA-Hybrid's importance pooling, "
                  "may gain from that alone: SSA-Hybrid beat vanilla on STS-B earlier (+0.057, p = 0.001). Where "
                  "mean-pool gains as much, the head explains the gain, not the method's attention."]
    return lines + [""]


def _task_notes(a: dict, baseline: str) -> list[str]:
    """Whether the baseline reaches the task's target, is at chance level, and the task's seed noise."""
    task, base, lines = a["task"], a["base"], []
    if a["task"] in TARGETS and base is not None:
        reached = base["mean"] >= TARGETS[task]
        seeds = f"{base['n']} seed{'s' if base['n'] > 1 else ''}"
        lines += [f"Does {baseline} learn {task}? Target {a['metric']} ≥ {TARGETS[task]:.2f}: {baseline} scores "
                  f"{base['mean']:.4f} (mean of {seeds}), **{'yes' if reached else 'no'}**.", ""]
    if a["at_chance"]:
        lines += [f"**{baseline} scores {base['mean']:.4f}, chance level here is {a['chance']:.4f}: this budget "
                  f"does not learn {task}, so no comparison of methods on it is informative.**", ""]
    if a["sd"] is None:
        return lines + ["Seed noise: no method has 2 paired seeds, so there is none to measure.", ""]
    detectable, methods = a["detectable"], f"{a['methods']} method" + ("s" if a["methods"] > 1 else "")
    return lines + [f"Seed noise: the paired differences to {baseline} have sd {a['sd']:.4f} (pooled over "
                    f"{methods}) with {a['seeds']} seeds, so a paired t-test at p < {SIGNIFICANT} "
                    f"detects a true difference of ±{detectable:.4f} ({a['scale'] * detectable:.1f} points) with "
                    f"{POWER:.0%} power.", ""]


def _row(a: dict, label: str, group: dict, baseline: str) -> list[str]:
    """The cells of one row of a task's table; label is the method with its own options off their defaults
    (`method_groups`)."""
    test = a["tests"].get(label, {})
    diff, p, p_holm = test.get("mean_difference"), test.get("p_value"), test.get("p_holm")
    claim = a["claims"].get(label)
    pairs = test.get("pairs", 0)  # a method still short of the task's seeds detects less than the others
    detectable = detectable_difference(a["sd"], pairs, SIGNIFICANT, POWER)
    if label == baseline:
        said = "baseline"
    elif a["at_chance"] and p is not None:
        said = f"not judged: {baseline} is at chance level"
    else:
        needed = None if claim is None or a["sd"] is None else \
            seeds_to_detect(a["sd"], claim[0] / a["scale"], most=MOST_SEEDS) or MOST_SEEDS + 1
        said = verdict(diff, p_holm if p is not None else None, None if claim is None else claim[0],
                       pairs, detectable, pairs, a["scale"], needed)
    if group["method"] in CONTROLS:
        said = f"{CONTROLS[group['method']]}; {said}"
    return [label, str(group["n"]), mean_sd(group["metrics"].get(a["metric"])),
            "" if diff is None else f"{diff:+.4f}", "" if p is None else f"{p:.3f}",
            "" if p_holm is None else f"{p_holm:.3f}",
            "" if label == baseline or detectable is None else
            f"±{detectable:.4f} ({a['scale'] * detectable:.1f} pts)",
            "" if claim is None else f"{claim[0]:+.1f}{_unless_ours(claim[2], a)} ({claim[1]})", said]


def _unless_ours(paper_metric: str, a: dict) -> str:
    """' spearmanr' where the paper's claim is on another metric than the task's, else ''."""
    return "" if f"dev {paper_metric}" == a["metric"] else f" {paper_metric}"


def _claims_on_other_metrics(a: dict, baseline: str) -> list[str]:
    """Under a task's table: each method whose paper reports its gain on another metric than the task's, tested
    on that metric too, so the claim is set beside a measurement of its own kind."""
    lines = []
    for label, claim in a["claims"].items():
        if claim is None or f"dev {claim[2]}" == a["metric"]:
            continue
        tests = [t for t in collect.paired_tests(a["rows"], f"dev {claim[2]}", baseline) if t["method"] == label]
        said = "no run records it" if not tests or tests[0]["p_value"] is None else \
            (f"Δ {tests[0]['mean_difference']:+.4f} ({a['scale'] * tests[0]['mean_difference']:+.1f} pts) over "
             f"{tests[0]['pairs']} seeds, p {tests[0]['p_value']:.3f} (outside Holm's family, which tests each "
             f"method once, on {a['metric'].removeprefix('dev ')})")
        lines.append(f"{label}: {claim[1]} give the gain on {claim[2]}, not {a['metric'].removeprefix('dev ')}; "
                     f"on dev {claim[2]}: {said}.")
    return lines + [""] if lines else []


def _learnt(a: dict) -> str:
    """'yes' / 'no' against the task's target; 'at chance' where it has learnt nothing; '' without a target."""
    if a["base"] is None:
        return "not run yet"
    if a["at_chance"]:
        return "**at chance**"
    return "" if a["task"] not in TARGETS else "yes" if a["base"]["mean"] >= TARGETS[a["task"]] else "**no**"


def _target(task: str) -> str:
    return f"{TARGETS[task]:g}" if task in TARGETS else ""


def _glance(tasks: list[dict], baseline: str, pending: list[str]) -> list[str]:
    """One row per task: does the baseline learn it, what can its seeds detect, which methods differ after Holm;
    then the grid's tasks with no complete run yet (pending)."""
    cells = []
    for a in tasks:
        base, methods = a["base"], [m for m in a["groups"] if m != baseline]
        full = sum(a["groups"][m]["n"] >= 5 for m in methods)
        beyond = [f"{m} {a['scale'] * t['mean_difference']:+.1f} pts" for m, t in a["tests"].items()
                  if t["p_holm"] is not None and t["p_holm"] < SIGNIFICANT]
        cells.append([f"{a['task']} ({a['metric'].removeprefix('dev ')})",
                      "" if base is None else f"{base['mean']:.4f} ({base['n']})",
                      "unknown (dev data not found here)" if a["chance"] is None else f"{a['chance']:.4f}",
                      _target(a["task"]), _learnt(a),
                      "" if a["detectable"] is None else f"±{a['scale'] * a['detectable']:.1f} pts",
                      f"{full} / {len(methods)}", ", ".join(beyond) or "none"])
    cells += [[task, "", "", _target(task), "not run yet", "", "", ""] for task in pending]
    columns = ["task", f"{baseline} (seeds)", "chance level", "target", "learnt", "detectable Δ",
               "methods with 5 seeds / with runs", f"beyond seed noise (p (Holm) < {SIGNIFICANT})"]
    return ["## At a glance", "", *markdown(pd.DataFrame(cells, columns=columns)), ""]


def _many_tests(family: list[dict]) -> list[str]:
    if not family:
        return []
    m, tasks = len(family), ", ".join(dict.fromkeys(t["task"] for t in family))
    kept = [f"{t['method']} on {t['task']}" for t in family if t["p_holm"] < SIGNIFICANT]
    tests = "test" if m == 1 else "tests"
    return ["## Many tests at once", "",
            f"On the tasks the baseline learnt (above chance level: {tasks}) there {'is' if m == 1 else 'are'} {m} "
            f"paired {tests}; at p < {SIGNIFICANT} about {m * SIGNIFICANT:.1f} of them would come out "
            f"'significant' by chance alone. {sum(t['p_value'] < SIGNIFICANT for t in family)} did; after Holm's "
            f"correction for {m} {tests}, {len(kept)} remain{'s' if len(kept) == 1 else ''}"
            f"{': ' + ', '.join(kept) if kept else ''}. The verdicts above read p (Holm).", ""]


def report(runs_dir: str | Path, command: str, grid: str | Path, baseline: str = "vanilla",
           rebuild: str | None = None, archive: str | Path | None = None) -> str:
    """The markdown report of all complete runs under runs_dir (a sweep's folder or the archive: the same runs
    give the same report); command runs the grid, rebuild (if given) rebuilds the report from archive."""
    rows = collect.collect(runs_dir)
    tasks = [analyse(task, rows, baseline) for task in dict.fromkeys(r["task"] for r in rows)]
    family = holm_family(tasks)
    planned = _planned(grid)
    lines = _header(rows, command, grid, planned, rebuild, None if archive is None else Path(archive), baseline)
    ran = {a["task"] for a in tasks}
    lines += _glance(tasks, baseline, [t for t in dict.fromkeys(c.task for c in planned or []) if t not in ran])
    for a in tasks:
        table = pd.DataFrame([_row(a, label, group, baseline) for label, group in a["groups"].items()],
                             columns=["method", "seeds", a["metric"], f"Δ vs {baseline}", "p", "p (Holm)",
                                      f"detectable Δ ({POWER:.0%} power)", "paper's Δ", "verdict"])
        lines += [f"## {a['task']} ({a['metric']})", "", *_task_notes(a, baseline), *markdown(table), ""]
        lines += _claims_on_other_metrics(a, baseline)
    return "\n".join(lines + _many_tests(family))


def default_archive(grid: str | Path, out: str | Path) -> Path:
    """Where the runs' metrics.json files are kept: runs/<grid name> beside the report
    (results/runs/cpu_reproduction for the default grid and report)."""
    return Path(out).parent / "runs" / Path(grid).stem


def commands(grid=None, out=None, archive=None) -> tuple[str, str]:
    """The command line that runs (or resumes) the grid and the one that rebuilds the report from the archive,
    with the options given (None: left at its default). --output-dir and --shard are left out: they change where
    and how the runs are made, not the report."""
    options = "".join(f" {flag} {shlex.quote(str(value))}" for flag, value in
                      (("--grid", grid), ("--report", out), ("--archive", archive)) if value is not None)
    line = "python -m benchmarks reproduce"
    return f"{line}{options}", f"{line} --from-archive{options}"


def reproduce(grid: str | Path = DEFAULT_GRID, output_dir: str | Path | None = None,
              out: str | Path = DEFAULT_REPORT, shard: tuple[int, int] = (0, 1), command: str | None = None,
              archive: str | Path | None = None, from_archive: bool = False, rebuild: str | None = None) -> int:
    """Run (or resume) the grid, each complete run's metrics.json copied to the archive as it finishes, then
    write the report from every complete run; with from_archive, write it from the archive alone and run
    nothing. Return the sweep's exit code (0 from the archive)."""
    archive = Path(archive) if archive is not None else default_archive(grid, out)
    run_line, rebuild_line = commands()
    if from_archive:
        if not archive.is_dir():
            raise UsageError(f"no results archive at {archive}: run the grid first (without --from-archive), "
                             "or name the archive with --archive DIR")
        code, source = 0, archive
    else:
        output_dir = Path(output_dir) if output_dir is not None else Path("runs/sweep") / Path(grid).stem
        load_grid(grid, output_dir)  # a bad grid fails here, before anything runs
        code, source = sweep(grid, output_dir, shard, archive=archive), output_dir
    text = report(source, command or run_line, grid, rebuild=rebuild or rebuild_line, archive=archive)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, lambda f: f.write(text.encode()))
    print(text)
    print(f"wrote {out}")
    return code


def main(args) -> int:
    """`python -m benchmarks reproduce` from the parsed bench options."""
    from course_lib.lab.sweep import parse_shard

    archive, from_archive = args.archive, args.from_archive
    command, rebuild = commands(args.grid, args.report, archive)
    return reproduce(args.grid or DEFAULT_GRID, args.output_dir, args.report or DEFAULT_REPORT,
                     parse_shard(args.shard or "0/1"), command, archive, from_archive, rebuild)
