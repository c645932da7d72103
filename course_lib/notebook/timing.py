"""Timing side by side: contestants interleaved in one process, ratios taken within each round.

Drift in a shared machine's speed (other processes, turbo, thermal) hits every contestant of a round alike, so
the per-round ratio is steadier than the ratio of two separately timed medians.
"""
from __future__ import annotations

import os
import statistics
import time
from typing import Callable

from course_lib.runtime.repro import progress


def timed(fn) -> float:
    """Seconds one call of fn takes."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def interleaved(runs: dict[str, Callable[[], object]], repeats: int, warmup: int, desc: str) -> dict[str, list]:
    """Seconds of each run, `repeats` rounds after `warmup` untimed ones, the order rotated every round."""
    names, times = list(runs), {name: [] for name in runs}
    for r in progress(range(warmup + repeats), desc=desc, leave=False):
        for name in names[r % len(names):] + names[:r % len(names)]:
            seconds = timed(runs[name])
            if r >= warmup:
                times[name].append(seconds)
    return times


def ratio_summary(numerators: list[float], denominators: list[float]) -> dict:
    """Median and interquartile range of the per-round ratios: pairs timed in the same round share its drift."""
    ratios = [a / b for a, b in zip(numerators, denominators)]
    q1, _, q3 = statistics.quantiles(ratios, n=4, method="inclusive") if len(ratios) > 1 else ratios * 3
    return {"median": round(statistics.median(ratios), 3), "iqr": [round(q1, 3), round(q3, 3)]}


def machine_load() -> list[float] | None:
    """1, 5 and 15 minute load averages: above the thread count, other processes competed for the cores."""
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None
