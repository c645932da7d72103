"""The lab's tables on pandas: its group-by, the mean ± sd over seeds, and one markdown writer.

Every results table (`collect`'s page, `benchmarks/reproduce.py`'s report) is written by `markdown`: `| a | b |`,
`|---|---|`, a line per row, nothing padded (`DataFrame.to_markdown` needs `tabulate` and pads columns)."""
from __future__ import annotations

import math
import statistics

import pandas as pd


def markdown(frame: pd.DataFrame) -> list[str]:
    """Returns the frame as the lines of a markdown table: its column names, the rule, then one line per row."""
    rows = frame.itertuples(index=False, name=None)
    lines = ["| " + " | ".join(map(str, cells)) + " |" for cells in [frame.columns, *rows]]
    return [lines[0], "|" + "---|" * len(frame.columns), *lines[1:]]


def grouped(items: list, key) -> dict:
    """Returns {key(item): [its items]}, the keys in the order they first appear (a plain loop: pandas' group-by
    would give a key None back as NaN)."""
    groups: dict = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return groups


def seed_stats(values: pd.DataFrame, by: list[str]) -> dict:
    """Returns {first key: {second key: stats}} for the `value` column grouped by the two `by` columns, in the
    order the groups first appear. Each stats dict holds the mean, the sample standard deviation `std` (ddof=1;
    None for a single value), the number of values `n`, and `counts`, whether every value is a whole number. The
    mean and sd are `statistics`' (exactly rounded sums), not pandas' own, which may differ in the last bit."""
    by_key = values.assign(whole=values["value"] % 1 == 0).groupby(by, sort=False)
    table = by_key.agg(mean=("value", statistics.fmean), n=("value", "size"), counts=("whole", "all"),
                       std=("value", lambda v: statistics.stdev(v) if len(v) > 1 else math.nan))
    table = table[["mean", "std", "n", "counts"]]
    stats: dict = {}
    for (outer, inner), mean, std, n, counts in table.itertuples(name=None):
        stats.setdefault(outer, {})[inner] = {"mean": float(mean), "std": None if n < 2 else float(std), "n": int(n),
                                              "counts": bool(counts)}
    return stats


def mean_sd(stats: dict | None, scale: float = 1, digits: int = 4) -> str:
    """Returns '0.8123 ± 0.0100': the mean and standard deviation times scale, to `digits` decimals (the sd to at
    least one); the mean alone for one value (std None), and '' without stats."""
    if stats is None:
        return ""
    mean = f"{stats['mean'] * scale:.{digits}f}"
    return mean if stats["std"] is None else f"{mean} ± {stats['std'] * scale:.{max(digits, 1)}f}"
