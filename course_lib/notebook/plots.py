"""Seaborn figures the notebooks share: attention heatmaps, sparsity, token scores, masking, curves, results.

Each function takes plain numbers (tensors, lists, dicts), draws on `ax` (a new figure when None) and
returns the axes, so a notebook cell stays one call. No function reads files or models. bertviz is not
used: it needs a CDN that an offline JupyterLab lacks.
"""
from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

sns.set_theme(style="whitegrid", context="notebook")


def _axes(ax, size=(6, 4)):
    if ax is None:
        _, ax = plt.subplots(figsize=size, layout="constrained")
    return ax


def _numpy(x):
    return x.detach().float().cpu().numpy() if hasattr(x, "detach") else x


def attention_heatmap(probs, tokens: list[str], ax=None, title: str = "", vmax: float | None = None):
    """One head's (L, L) attention map: row = query token, column = key token."""
    ax = _axes(ax, (5, 4.5))
    sns.heatmap(_numpy(probs), xticklabels=tokens, yticklabels=tokens, cmap="rocket_r", vmin=0, vmax=vmax,
                square=True, cbar_kws={"shrink": 0.7}, ax=ax)
    ax.set(title=title, xlabel="key", ylabel="query")
    ax.tick_params(axis="x", rotation=90)
    ax.tick_params(axis="y", rotation=0)
    return ax


def attention_maps(maps: dict, tokens: list[str], suptitle: str = ""):
    """Several (L, L) maps side by side on one colour scale, e.g. {'softmax': p, 'sparsegen-lin': q}."""
    fig, axes = plt.subplots(1, len(maps), figsize=(4.6 * len(maps), 4.4), layout="constrained", squeeze=False)
    vmax = max(float(_numpy(m).max()) for m in maps.values())
    for ax, (name, probs) in zip(axes[0], maps.items()):
        attention_heatmap(probs, tokens, ax=ax, title=name, vmax=vmax)
    if suptitle:
        fig.suptitle(suptitle)
    return axes[0]


def line(x, ys: dict, xlabel: str, ylabel: str, ax=None, title: str = "", logy: bool = False, marker="o"):
    """One line per entry of ys ({name: values}), sharing x: loss curves, sparsity against lambda, ..."""
    return curves({name: (x, values) for name, values in ys.items()}, xlabel, ylabel, ax, title, logy, marker,
                  size=(6, 4))


def colour_range(*score_rows) -> tuple[float, float]:
    """The smallest and largest of all the rows: one colour scale for strips that are compared."""
    values = [float(v) for row in score_rows for v in np.asarray(_numpy(row)).reshape(-1)]
    return min(values), max(values)


def token_scores(tokens: list[str], scores, ax=None, title: str = "", label: str = "score",
                 vrange: tuple[float, float] | None = None):
    """A sentence's per-token scores (SSA importance, attention received) as one coloured strip.

    The colours span `vrange` (default: this strip's own smallest to largest score), not 0 to 1: after a short
    run SSA's scores can all lie within 0.97-0.99, which a 0-1 scale shows as one flat block. The printed
    numbers get a third decimal when the range is that narrow.
    """
    vmin, vmax = vrange if vrange is not None else colour_range(scores)
    ax = _axes(ax, (max(4, 0.55 * len(tokens)), 1.6))
    sns.heatmap(np.asarray(_numpy(scores))[None, :], xticklabels=tokens, yticklabels=[label], cmap="mako_r", vmin=vmin,
                vmax=max(vmax, vmin + 1e-6), annot=True, fmt=".3f" if vmax - vmin < 0.1 else ".2f",
                annot_kws={"size": 7}, cbar=False, ax=ax)
    ax.tick_params(axis="x", rotation=60)
    ax.set_title(title)
    return ax


def by_layer(values: dict, ylabel: str, ax=None, title: str = ""):
    """Bars per layer, one hue per entry: e.g. ASA's masked fraction for tau = 0.1, 0.3, 1.0."""
    ax = _axes(ax)
    rows = [{"layer": i, "series": name, ylabel: float(v)} for name, vs in values.items()
            for i, v in enumerate(_numpy(vs))]
    sns.barplot(data=pd.DataFrame(rows), x="layer", y=ylabel, hue="series" if len(values) > 1 else None, ax=ax)
    ax.set_title(title)
    return ax


def results(rows: list[dict], metric: str, x: str = "method", hue: str | None = "task", ax=None, title: str = ""):
    """Mean and seed points of a metric: rows are dicts with keys x, hue (optional) and metric."""
    ax = _axes(ax, (7, 4))
    rows = pd.DataFrame(rows)
    sns.barplot(data=rows, x=x, y=metric, hue=hue, errorbar=None, alpha=0.8, ax=ax)
    dots = {"palette": "dark:black"} if hue is not None else {"color": "black"}
    sns.stripplot(data=rows, x=x, y=metric, hue=hue, dodge=hue is not None, size=3, legend=False, ax=ax, **dots)
    ax.set_title(title)
    ax.tick_params(axis="x", rotation=20)
    return ax


def attention_grid(maps: dict, tokens: list[str], ncols: int = 3, suptitle: str = "", vmax: float | None = None):
    """Many (L, L) maps in rows of ncols, one colour scale (max of all maps unless vmax): AG's target patterns,
    or the guided and unguided heads of two models."""
    nrows = -(-len(maps) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 4.0 * nrows), layout="constrained", squeeze=False)
    vmax = vmax if vmax is not None else max(float(_numpy(m).max()) for m in maps.values())
    for ax, (name, probs) in zip(axes.flat, maps.items()):
        attention_heatmap(probs, tokens, ax=ax, title=name, vmax=vmax)
    for ax in list(axes.flat)[len(maps):]:
        ax.set_visible(False)
    if suptitle:
        fig.suptitle(suptitle)
    return axes


def token_strips(strips: dict, tokens: list[str], ax=None, title: str = "", vmax: float | None = None):
    """Per-token values as one annotated row per entry, on one colour scale (0 to vmax, else the largest value):
    e.g. the attention [CLS] pays each token in several encoders, or SSA token scores of two models (vmax=1)."""
    ax = _axes(ax, (max(4, 0.6 * len(tokens)), 0.6 + 0.45 * len(strips)))
    values = pd.DataFrame([[float(v) for v in _numpy(row)] for row in strips.values()]).to_numpy()
    sns.heatmap(values, xticklabels=tokens, yticklabels=list(strips), cmap="mako_r", vmin=0,
                vmax=vmax if vmax is not None else values.max(), annot=True, fmt=".2f", annot_kws={"size": 7},
                cbar=False, ax=ax)
    ax.tick_params(axis="x", rotation=60)
    ax.tick_params(axis="y", rotation=0)
    ax.set_title(title)
    return ax


def seeds_by_method(points: list[dict], baselines: set[str], ncols: int = 3, suptitle: str = ""):
    """One panel per task: each recipe's seeds as dots and their mean as a bar, baselines first. points are
    `collect.seed_points`: task, method, label (the method and what sets its recipe apart), metric and value."""
    frame = pd.DataFrame(points)
    frame["label"] = frame["label"].map(lambda label: textwrap.fill(label, 42))  # recipes can be long: wrap them
    tasks = list(dict.fromkeys(frame["task"]))
    nrows = -(-len(tasks) // ncols)
    most = max(frame.groupby("task")["label"].nunique())
    fig, axes = plt.subplots(nrows, min(ncols, len(tasks)), figsize=(6.2 * min(ncols, len(tasks)),
                                                                      (1.0 + 0.55 * most) * nrows),
                             layout="constrained", squeeze=False)
    for ax, task in zip(axes.flat, tasks):  # horizontal bars: a recipe's label reads along its row
        mine = frame[frame["task"] == task]
        method_of = dict(zip(mine["label"], mine["method"]))
        order = sorted(method_of, key=lambda label: (method_of[label] not in baselines, label))
        sns.barplot(data=mine, y="label", x="value", order=order, errorbar=None, alpha=0.45, ax=ax)
        sns.stripplot(data=mine, y="label", x="value", order=order, color="black", size=4, ax=ax)
        ax.set(title=task, ylabel="", xlabel=mine["metric"].iloc[0])
        ax.tick_params(axis="y", labelsize=8)
    for ax in list(axes.flat)[len(tasks):]:
        ax.set_visible(False)
    if suptitle:
        fig.suptitle(suptitle)
    return axes


def curves(named: dict, xlabel: str, ylabel: str, ax=None, title: str = "", logy: bool = False, marker="o",
           size=(7, 4)):
    """One line per entry of named ({name: (x, y)}), each with its own x: runs' curves of unequal length."""
    ax = _axes(ax, size)
    for name, (x, y) in named.items():
        ax.plot(x, _numpy(y), marker=marker, markersize=3, label=name)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    if logy:
        ax.set_yscale("log")
    if len(named) > 1:
        ax.legend()
    return ax
