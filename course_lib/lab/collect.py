"""`python -m course_lib collect RUNS_DIR`: one table of results from the finished runs in a folder, every kind.

Reads every `metrics.json` under RUNS_DIR whose status is "complete" (a partial or failed run never enters):
fine-tuning runs of every task family, multitask runs (a row per head and one for the overall score) and MLM
pre-training runs (held-out MLM loss and perplexity; a fine-tune started from one of them names it and is
compared with the fine-tune started from plain MLM). What each kind contributes is `records.KINDS`. A file
that is no course_lib metrics.json (truncated, foreign) is skipped with one warning line naming it. Runs that
differ only in their seed form a group; collect writes, atomically:

- `results.csv`: one row per run and head (its folder, kind, task, method, its group's settings, seed, every
  metric as `dev_accuracy`, `test_f1`, `held-out_mlm_loss`, ..., training time);
- `results.md`: a section per kind with one row per group (mean ± sample standard deviation, ddof=1, over
  seeds; one seed shows its number without ±) and the papers' numbers, then a GLUE section (each method's
  GLUE score per task and, with all nine tasks, its GLUE average, by `lab.glue_score`, beside the papers'), then
  each method against its baseline (vanilla; plain MLM for AG) by a paired t-test over seeds on the task's main
  metric, the direction known (lower is better for a loss or perplexity) and Holm's correction across the
  table's tests.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import pandas as pd
from pydantic import Field

from course_lib.lab.glue_score import GLUE_SCORE, GLUE_SCORE_PARTS, glue_average, missing_glue_tasks
from course_lib.lab.records import KINDS, kind_of, lower_is_better, percent_scale
from course_lib.lab.reported import GLUE, reported
from course_lib.runtime.command_line import add_fields, parsed
from course_lib.runtime.errors import Parser, UsageError, report_errors
from course_lib.runtime.repro import METRICS, atomic_write, lock_exclusive
from course_lib.runtime.settings import Settings
from course_lib.lab.significance import holm_adjusted, paired_t_test
from course_lib.lab.tables import grouped, markdown, mean_sd, seed_stats
from course_lib.tasks.registry import family_of

NOT_GROUPED = ("seed", "output_dir")  # runs that differ only in these are seeds of one group


def read_result(path: Path) -> dict | None:
    """A metrics.json's content, or None after one warning line when it is no course_lib metrics.json."""
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        print(f"warning: skipping {path}: {err}", file=sys.stderr)
        return None
    if isinstance(result, dict) and result.get("kind") == "notebook":
        return None  # a notebook's own summary; the runs it made sit in folders below it
    if not isinstance(result, dict) or kind_of(result) is None:
        print(f"warning: skipping {path}: not a course_lib metrics.json (no known kind, config or task)",
              file=sys.stderr)
        return None
    return result


def collect(runs_dir: str | Path) -> list[dict]:
    """One dict per complete run and head under runs_dir: run (its folder, relative), kind, task, method,
    baseline, config, metrics, main_metric, seconds; a fine-tune of a pre-training run here also `pretrained`."""
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        raise UsageError(f"runs folder {str(runs_dir)!r} does not exist or is not a folder")
    rows = []
    for path in sorted(runs_dir.rglob(METRICS)):
        result = read_result(path)
        if result is None or result.get("status") != "complete":
            continue
        kind = kind_of(result)
        config = in_run_folder(kind.config_of(result["config"]), path.parent)
        for entry in kind.tasks(result):
            rows.append({"run": path.parent.relative_to(runs_dir).as_posix(), "kind": kind.name,
                         "method": kind.method(config), "baseline": kind.baseline, "config": dict(config),
                         **entry, "train_seconds": result.get("timing", {}).get("train_seconds")})
    link_pretraining(rows)
    return rows


def in_run_folder(config: dict, folder: Path) -> dict:
    """The config with each absolute path inside the run's folder made relative to it (a run's own files: a
    notebook's generated train.tsv), so runs that read their own copy of a file group as seeds, and a table says
    `train.tsv` rather than one temporary path per run."""
    where = os.path.abspath(folder)
    relative = {}
    for key, value in config.items():
        if isinstance(value, str) and os.path.isabs(value) and key != "output_dir":
            inside = os.path.relpath(value, where)
            if not inside.startswith(os.pardir) and inside != os.curdir:
                relative[key] = inside
    return {**config, **relative}


def link_pretraining(rows: list[dict]) -> None:
    """A fine-tune whose `model` is a pre-training run collected here names that run (`pretrained`), stands
    for 'METHOD (PRE-pretrained)' and is tested against the same fine-tune of the plain-MLM run; its `model`
    becomes the pre-training recipe less method and seed, so seeds and the two pre-trainings pair up."""
    pretrained = {row["run"]: row for row in rows if row["kind"] == "pretrain"}
    for row in rows:
        model = str(row["config"].get("model") or "").rstrip("/")
        source = next((run for run in pretrained if model == run or model.endswith("/" + run)), None)
        if row["kind"] != "finetune" or source is None:
            continue
        base = pretrained[source]
        recipe = {k: v for k, v in base["config"].items()
                  if k not in (*NOT_GROUPED, "corpus") and not KINDS["pretrain"].is_method_field(k)}
        digest = hashlib.sha1(json.dumps(recipe, sort_keys=True, default=str).encode()).hexdigest()[:8]
        row.update(pretrained=source, method=f"{row['method']} ({base['method']}-pretrained)",
                   baseline=f"{row['method']} ({base['baseline']}-pretrained)")
        row["config"]["model"] = f"pre-trained here, recipe {digest}"


def _of_kind(rows: list[dict], *also: str) -> dict:
    """Rows by their kind (kinds have different settings), or by (kind, *also) where more keys are named, in the
    order the keys first appear."""
    return grouped(rows, lambda row: tuple(row[field] for field in ("kind", *also)) if also else row["kind"])


def group_fields(rows: list[dict]) -> list[str]:
    """task, method, then every other config field whose value differs between the runs that read it (but the
    seed): ASA's tau is no column when every ASA run used one tau, whatever the vanilla runs saved. Meant for
    the rows of one kind: kinds have different settings."""
    keys = sorted({k for row in rows for k in row["config"]} - {"task", "method", *NOT_GROUPED})
    varying = [k for k in keys
               if len({json.dumps(row["config"].get(k), default=str) for row in rows if _reads(row, k)}) > 1]
    return ["task", "method", *varying]


def _reads(row: dict, field: str) -> bool:
    """Whether the row's run reads the setting (its kind's field, its method's or task family's option)."""
    return KINDS[row["kind"]].reads(row["config"], row["task"], field)


NOT_READ = ""  # a setting the row's method and task do not read: an empty cell, and no part of its group


def _group_value(row: dict, field: str):
    if field in ("task", "method", "kind"):
        return row[field]
    return row["config"].get(field) if _reads(row, field) else NOT_READ


def _groups(rows: list[dict], fields: list[str]) -> list[list[dict]]:
    """Rows with equal fields, each seed once (the same settings and seed in two folders, say two notebooks'
    vanilla runs, is one deterministic run counted once), in the order the groups first appear."""
    runs = pd.DataFrame({"group": [json.dumps([_group_value(row, f) for f in fields], default=str) for row in rows],
                         "seed": [row["config"].get("seed") for row in rows], "row": rows})
    runs = runs.drop_duplicates(["group", "seed"])
    return [list(members) for _, members in runs.groupby("group", sort=False)["row"]]


def summarize(rows: list[dict]) -> list[dict]:
    """One dict per group: kind, its fields, seeds, n, and {metric: {'mean', 'std', 'n', 'counts'}} over its seeds
    (`tables.seed_stats`: std None for n = 1)."""
    summary = []
    for kind, mine in sorted(_of_kind(rows).items(), key=lambda item: list(KINDS).index(item[0])):
        fields = group_fields(mine)
        groups = _groups(mine, fields)
        values = pd.DataFrame([(i, name, value) for i, members in enumerate(groups) for row in members
                               for name, value in row["metrics"].items()], columns=["group", "metric", "value"])
        stats = seed_stats(values, ["group", "metric"])
        summary += sorted(({"kind": kind, **{f: _group_value(members[0], f) for f in fields},
                            "seeds": sorted(row["config"].get("seed") for row in members), "n": len(members),
                            "metrics": stats.get(i, {}), "main_metric": members[0]["main_metric"]}
                           for i, members in enumerate(groups)), key=lambda g: [str(g[f]) for f in fields])
    return summary


def _pair_key(row: dict) -> tuple:
    """Everything but the method and its own options: runs equal in this differ only by the method."""
    kind = KINDS[row["kind"]]
    shared = {k: v for k, v in row["config"].items() if k != "output_dir" and not kind.is_method_field(k)}
    return row["kind"], row["task"], json.dumps(shared, sort_keys=True, default=str)


def _method_label(row: dict) -> str:
    """The method with its own options where they differ from the default: ssa-co with paper labels is its
    own row."""
    options = KINDS[row["kind"]].label_options(row["config"], row["task"])
    said = ", ".join(f"{k}={v}" for k, v in options.items())
    return f"{row['method']} ({said})" if said else row["method"]


def paired_runs(rows: list[dict], metric: str | None = None, baseline: str | None = None) -> pd.DataFrame:
    """A frame of the pairs `paired_tests` tests, in the rows' order: each run that is not its baseline (kind, task,
    method, label: `_method_label`, against: its baseline, metric) with its `value` and the `base` value of the
    baseline's run paired with it (the same `_pair_key`: of one seed, differing only in the method)."""
    runs = pd.DataFrame([(row["kind"], row["task"], row["method"], _method_label(row), baseline or row["baseline"],
                          _pair_key(row), name, row["metrics"][name]) for row in rows
                         if (name := row["main_metric"] if metric is None else metric) in row["metrics"]],
                        columns=["kind", "task", "method", "label", "against", "key", "metric", "value"])
    base = runs[runs["method"] == runs["against"]].drop_duplicates(["method", "key", "metric"], keep="last")
    return runs[runs["method"] != runs["against"]].merge(
        base[["method", "key", "metric", "value"]].rename(columns={"method": "against", "value": "base"}),
        on=["against", "key", "metric"])


def paired_tests(rows: list[dict], metric: str | None = None, baseline: str | None = None) -> list[dict]:
    """Each method against its baseline on the same task and seeds: mean difference and a paired t-test.

    Pairs are runs of one kind with equal task and seed whose other settings may differ only in the method,
    so a seed's data order and initialisation are shared and the test sees the method's effect alone. By
    default each row is tested on its task's main metric against its kind's baseline (vanilla; plain MLM for
    pre-training). `better` reads the sign the metric's way (lower is better for a loss or perplexity); the
    p-value is two-sided (`significance.paired_t_test`), None with fewer than 2 pairs or all pairs equal, and
    `p_holm` is Holm's adjustment across all the tests returned.
    """
    pairs, results = paired_runs(rows, metric, baseline), []
    for (kind, task, method, against, name), pair in pairs.groupby(["kind", "task", "label", "against", "metric"]):
        diff, p = paired_t_test(pair["value"].tolist(), pair["base"].tolist())
        lower = lower_is_better(name)
        results.append({"kind": kind, "task": task, "method": method, "baseline": against, "metric": name,
                        "pairs": len(pair), "mean_difference": diff, "p_value": p, "lower_is_better": lower,
                        "better": None if diff == 0 else (diff < 0) == lower})
    for result, adjusted in zip(results, holm_adjusted([r["p_value"] for r in results])):
        result["p_holm"] = adjusted
    return results


def _recipe_label(row: dict, varying: list[str]) -> str:
    """The method with its own options (`_method_label`) and the other settings that vary within its task."""
    settings = ", ".join(f"{field}={_group_value(row, field)}" for field in varying)
    return _method_label(row) + (f" [{settings}]" if settings else "")


def seed_points(rows: list[dict]) -> list[dict]:
    """Each run's main metric as a point (task, method, label, metric, value, seed): what the seed plots draw.

    label tells a task's recipes apart as the tables do: a method run at two learning rates is two columns,
    never one pool of seeds, and the same run in two folders is one point. A score is on the tables' scale,
    percent (its metric says so), so a plot under a table reads as the table does."""
    points = []
    for (kind, _), mine in _of_kind(rows, "task").items():
        fields = group_fields(mine)
        varying = [field for field in fields[2:] if not KINDS[kind].is_method_field(field)]
        for row in (row for members in _groups(mine, fields) for row in members):
            metric = row["main_metric"]
            if metric in row["metrics"]:
                scale = percent_scale(row["task"], metric)
                points.append({"task": row["task"], "method": row["method"], "label": _recipe_label(row, varying),
                               "metric": metric if scale is None else f"{metric} (%)", "seed": row["config"].get("seed"),
                               "value": row["metrics"][metric] * (scale or 1)})
    return points


def run_curves(runs_dir: str | Path, rows: list[dict], curve: str = "eval_curve", field: str = "mlm_loss") -> dict:
    """{'ag, seed 0': (steps, values)}: a curve of each pre-training run's metrics.json (held-out MLM loss)."""
    named = {}
    for row in rows:
        if row["kind"] == "pretrain":
            points = json.loads((Path(runs_dir) / row["run"] / METRICS).read_text(encoding="utf-8")).get(curve, [])
            label = f"{row['method']}, seed {row['config'].get('seed')}"
            label += "" if label not in named else f" ({row['run']})"
            named[label] = ([p["step"] for p in points], [p[field] for p in points])
    return named


def _metric_names(rows: list[dict]) -> list[str]:
    """'dev accuracy', 'dev f1', ..., then MNLI's 'dev_matched ...' and 'dev_mismatched ...' (' ' sorts before '_'),
    then 'dev glue_score', the one made of the others."""
    return sorted({name for row in rows for name in row["metrics"]}, key=lambda name: (name.endswith(GLUE_SCORE), name))


def to_csv(rows: list[dict]) -> str:
    """results.csv: a line per run and head, sorted by kind, task, method, settings and seed."""
    fields = list(dict.fromkeys(f for mine in _of_kind(rows).values() for f in group_fields(mine)[2:]))
    metrics = _metric_names(rows)
    order = sorted(rows, key=lambda r: [list(KINDS).index(r["kind"]), r["task"], r["method"]]
                   + [str(r["config"].get(f)) for f in fields] + [r["config"].get("seed") or 0])
    table = pd.DataFrame([[row["run"], row["kind"], row["task"], row["method"], *(_group_value(row, f) for f in fields),
                           row["config"].get("seed"), *(row["metrics"].get(m, "") for m in metrics),
                           row["train_seconds"], row.get("pretrained", "")] for row in order], dtype=object,
                         columns=["run", "kind", "task", "method", *fields, "seed",
                                  *(m.replace(" ", "_") for m in metrics), "train_seconds", "pretrained"])
    return table.to_csv(index=False, lineterminator="\n")


PAPER_COLUMN = "reported by the papers (not our model or split)"


def _shown(stats: dict | None, percent: int | None) -> str:
    """A metric's mean ± std as a table shows it: scores in percent (x `percent`, `records.percent_scale`; 2
    decimals), counts without decimals when the mean is whole, other values (losses) to 4 decimals."""
    if stats is None or percent or not stats.get("counts"):
        return mean_sd(stats, percent or 1, 2 if percent else 4)
    return mean_sd(stats, 1, 0 if float(stats["mean"]).is_integer() else 1)


def kind_table(rows: list[dict]) -> list[str]:
    """One kind's tables: one per task family where the kind says so (`RunKind.by_family`: fine-tuning runs
    of sentence, tagging, span-QA and multiple-choice tasks have different metrics and settings), each with the
    settings and metrics its own rows have; else one."""
    families = grouped(rows, lambda row: _family(row) if KINDS[row["kind"]].by_family else "")
    if len(families) < 2:
        return family_table(rows)
    lines = []
    for family, mine in families.items():
        lines += ["", f"### {family.replace('_', ' ')} tasks", "", *family_table(mine)]
    return lines[1:]


def _family(row: dict) -> str:
    """The task family of a row's task ('other' for a task this copy does not know)."""
    try:
        return family_of(row["task"], row["config"].get("task_type")).name
    except UsageError:
        return "other"


def family_table(rows: list[dict]) -> list[str]:
    """The markdown table of these rows' groups: settings (empty where a row does not read one), seeds, each
    metric's mean ± std on the papers' scale (`records.percent_scale`), the papers' numbers; then a line per task
    and method that has several rows, naming the settings that set them apart and the folders they come from."""
    fields, metrics = group_fields(rows), _metric_names(rows)
    cells = [[*(str(g[f]) for f in fields), str(g["n"]),
              *(_shown(g["metrics"].get(m), percent_scale(str(g["task"]), m)) for m in metrics),
              reported(str(g["method"]), str(g["task"]), g["kind"])] for g in summarize(rows)]
    lines = markdown(pd.DataFrame(cells, columns=[*fields, "seeds", *metrics, PAPER_COLUMN]))
    notes = recipe_notes(rows)
    return lines + (["", "Rows of the same task and method differ in their recipe:", *notes] if notes else [])


def recipe_notes(rows: list[dict]) -> list[str]:
    """'- vanilla on sst2, 3 rows: max_train_samples 1024 (01_kou2020_ssa), 2000 (03_...)': for each task and
    method with several groups, the settings whose values differ between them and where each group's runs are
    (the first folder of their path under the collected folder: the notebook or grid that ran them)."""
    fields, notes = group_fields(rows), []
    by_method = grouped(_groups(rows, fields), lambda members: (members[0]["task"], members[0]["method"]))
    for (task, method), groups in sorted(by_method.items()):
        differ = [f for f in fields[2:] if len({json.dumps(_group_value(g[0], f), default=str) for g in groups}) > 1]
        if len(groups) < 2 or not differ:
            continue
        recipes = []
        for members in groups:
            where = sorted({Path(row["run"]).parts[0] for row in members if Path(row["run"]).parts})
            settings = ", ".join(f"{f} {_group_value(members[0], f)}" for f in differ)
            recipes.append(settings + (f" ({', '.join(where)})" if where else ""))
        notes.append(f"- {method} on {task}, {len(groups)} rows: " + "; ".join(recipes))
    return notes


GLUE_METRIC = f"dev {GLUE_SCORE}"  # a GLUE fine-tuning row's score by GLUE's rule (`records._finetune_tasks`)


def _glue_recipes(rows: list[dict]) -> tuple[list[str], dict[tuple, dict[str, list[dict]]]]:
    """The GLUE fine-tuning runs as rows of the GLUE table: the settings that name a row, and {(method label,
    method, their values): {task: its group's runs}}. A method's tasks join one row whatever their own budgets
    (a task's lr or epochs); only a setting that sets apart two recipes of one task and method splits it."""
    mine = [row for row in rows if row["kind"] == "finetune" and GLUE_METRIC in row["metrics"]]
    fields = group_fields(mine)
    groups = _groups(mine, fields)
    by_task = grouped([members[0] for members in groups], lambda first: (first["task"], _method_label(first)))
    within = [f for f in fields[2:] if any(len({json.dumps(_group_value(row, f), default=str) for row in firsts}) > 1
                                           for firsts in by_task.values())]
    recipes = grouped(groups, lambda members: (_method_label(members[0]), members[0]["method"],
                                               tuple(_group_value(members[0], f) for f in within)))
    return within, {key: {members[0]["task"]: members for members in recipe}
                    for key, recipe in sorted(recipes.items(), key=lambda item: json.dumps(item[0], default=str))}


def glue_table(rows: list[dict]) -> list[str]:
    """The GLUE section of the results page: a row per method (and the settings that split it) with each GLUE
    task's score by GLUE's rule, mean ± std over seeds in percent, and with all nine tasks the GLUE average (the
    mean of the nine means) beside the papers' averages; a line names the tasks a row lacks. [] without GLUE runs."""
    within, recipes = _glue_recipes(rows)
    if not recipes:
        return []
    tasks = list(GLUE_SCORE_PARTS)
    scores = pd.DataFrame([(i, task, row["metrics"][GLUE_METRIC]) for i, by_task in enumerate(recipes.values())
                           for task, members in by_task.items() for row in members],
                          columns=["recipe", "task", "value"])
    cells, lacking = [], {}  # every recipe has scores, so seed_stats has its stats at its place
    for stats, ((label, method, values), by_task) in zip(seed_stats(scores, ["recipe", "task"]).values(),
                                                         recipes.items()):
        average = glue_average({task: s["mean"] for task, s in stats.items()})
        fewest, most = min(s["n"] for s in stats.values()), max(s["n"] for s in stats.values())
        cells.append([label, *map(str, values), str(fewest) if fewest == most else f"{fewest}-{most}",
                      *(_shown(stats.get(task), percent_scale(task, GLUE_METRIC)) for task in tasks),
                      "" if average is None else f"{100 * average:.2f}", reported(method, GLUE)])
        if average is None:
            settings = ", ".join(f"{f}={v}" for f, v in zip(within, values))
            name = f"{label} [{settings}]" if settings else label
            lacking.setdefault(tuple(missing_glue_tasks(by_task)), []).append(name)
    notes = [f"- no GLUE average for {', '.join(names)}: missing {', '.join(gone)}" for gone, names in lacking.items()]
    lines = ["Dev scores by GLUE's rule: CoLA MCC; STS-B the mean of Pearson and Spearman; MRPC and QQP the mean of "
             "F1 and accuracy; MNLI the mean of matched and mismatched; the others accuracy. The average is the "
             "unweighted mean of all nine (WNLI too), shown only where a row has them all.", "",
             *markdown(pd.DataFrame(cells, columns=["method", *within, "seeds", *tasks, "GLUE average", PAPER_COLUMN]))]
    return lines + ([""] + notes if notes else [])


def better_cell(test: dict) -> str:
    """The 'better?' cell of a paired test, what the test can say: 'yes' or 'no, worse' only when Holm's p is
    below 0.05, else 'not shown'; with under 2 pairs there is no test, and pairs that are all equal show no
    difference."""
    if test["better"] is None:
        return "equal in every pair"
    if test["p_value"] is None:
        return f"no test ({test['pairs']} pair{'s' if test['pairs'] != 1 else ''})"
    if test["p_holm"] >= 0.05:
        return "not shown"
    return "yes" if test["better"] else "no, worse"


def tests_table(tests: list[dict]) -> list[str]:
    """The paired tests as markdown: difference (on the table's scale), what the test says, raw and
    Holm-adjusted p."""
    cells = []
    for t in tests:
        percent = percent_scale(t["task"], t["metric"])
        difference = f"{t['mean_difference'] * percent:+.2f} points" if percent else f"{t['mean_difference']:+.4f}"
        cells.append([t["kind"], t["task"], t["method"], t["baseline"], t["metric"] + (" (lower is better)"
                      if t["lower_is_better"] else ""), str(t["pairs"]), difference, better_cell(t),
                      *("n/a" if p is None else f"{p:.3g}" for p in (t["p_value"], t["p_holm"]))])
    return markdown(pd.DataFrame(cells, columns=["kind", "task", "method", "against", "metric", "pairs",
                                                 "mean difference", "better? (Holm p < 0.05)", "p", "p (Holm)"]))


def to_markdown(rows: list[dict], runs_dir: str | Path) -> str:
    lines = [f"# Results: {runs_dir}", "",
             f"{len({r['run'] for r in rows})} complete runs. Each cell is the mean ± sample standard deviation "
             f"(ddof=1) over seeds; one seed shows no ±. The last column is what the papers report, for their "
             f"model (BERT-base, or RoBERTa-base size for AG) on their split: compare methods within a column "
             f"of this table, not across to it."]
    for kind, mine in sorted(_of_kind(rows).items(), key=lambda item: list(KINDS).index(item[0])):
        lines += ["", f"## {KINDS[kind].title}", "", *kind_table(mine)]
    glue = glue_table(rows)
    if glue:
        lines += ["", "## GLUE score", "", *glue]
    tests = paired_tests(rows)
    if tests:
        lines += ["", "## Each method against its baseline", "",
                  "Paired t-test over seeds on each task's main metric; p (Holm) is corrected for all the "
                  "tests below.", "", *tests_table(tests)]
    return "\n".join(lines) + "\n"


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


class CollectOptions(Settings):
    """`python -m course_lib collect`'s options."""

    runs_dir: str = Field(description="folder searched for metrics.json files",
                          json_schema_extra={"positional": True, "metavar": "RUNS_DIR"})
    out: str | None = Field(None, description="path of the tables without suffix: writes OUT.csv and OUT.md "
                            "(default RUNS_DIR/results)")


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m course_lib collect", description=__doc__.splitlines()[0])
    add_fields(parser, CollectOptions, words=True)

    def body() -> int:
        args = parsed(parser.parse_strict(argv), CollectOptions)
        csv_path, md_path, rows = write_results(args.runs_dir, args.out)
        print(md_path.read_text(encoding="utf-8"))
        print(f"wrote {md_path} and {csv_path} ({len(rows)} complete runs)")
        return 0
    return report_errors(body, "nothing was written")
