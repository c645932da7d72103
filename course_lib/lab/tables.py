"""The lab's tables: a pandas DataFrame as a markdown pipe table, and the statistics over seeds its cells show.

Every results table of the lab (`collect`'s results page) and of the reproduction report (`benchmarks/reproduce.py`)
is written by `markdown`, so they share one format: `| a | b |`, then `|---|---|`, then a row per frame row, each
cell as `str` gives it and nothing padded. (`DataFrame.to_markdown` would need the `tabulate` package and pads
columns to one width.) `seed_stats` groups a long frame of values with pandas and gives each group's mean, sample
standard deviation (ddof=1, as `statistics.stdev`) and count; `mean_sd` writes one of them as a table's cell.
"""
from __future__ import annotations

import pandas as pd


def markdown(frame: pd.DataFrame) -> list[str]:
    """Returns the frame as the lines of a markdown table: its column names, the rule, then one line per row."""
    def line(cells) -> str:
        return "| " + " | ".join(map(str, cells)) + " |"
    rows = [line(row) for row in frame.itertuples(index=False, name=None)]
    return [line(frame.columns), "|" + "---|" * len(frame.columns), *rows]


def seed_stats(values: pd.DataFrame, by: list[str]) -> dict:
    """Returns {first key: {second key: stats}} for the `value` column grouped by the two `by` columns, in the
    order the groups first appear. Each stats dict holds the mean, the sample standard deviation `std` (ddof=1;
    None for a single value), the number of values `n`, and `counts`, whether every value is a whole number."""
    grouped = values.assign(whole=values["value"] % 1 == 0).groupby(by, sort=False)
    table = grouped.agg(mean=("value", "mean"), std=("value", "std"), n=("value", "size"), counts=("whole", "all"))
    stats: dict = {}
    for (outer, inner), (mean, std, n, counts) in zip(table.index, table.itertuples(index=False, name=None)):
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
