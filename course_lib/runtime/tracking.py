"""Live curves (the `report_to` run option): a long grid's runs show their loss, learning rate, method statistics and
dev metrics while they train, not only in metrics.json when each ends.

The trackers are accelerate's (`Accelerator(log_with=...)`: TensorBoard, Weights & Biases, MLflow, ...), each an
optional package, plus `jsonl`, which needs none: one JSON line per logged step in the run folder's
`curves.jsonl`. The training loop logs (`TrainingLoop.track`): every logging window, the mean training loss and the
learning rate; every epoch (pre-training: every evaluation), the numbers of its history entry, nested names joined
with "/". A run's tracker is named by its folder, so a sweep's runs are told apart by their grid cell.
"""
from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

from accelerate.tracking import GeneralTracker, on_main_process

from course_lib.runtime.errors import UsageError

TRACKER_PACKAGES = {  # accelerate's trackers: the module each needs, and its pip package
    "tensorboard": ("tensorboard", "tensorboard"), "wandb": ("wandb", "wandb"), "mlflow": ("mlflow", "mlflow"),
    "comet_ml": ("comet_ml", "comet-ml"), "aim": ("aim", "aim"), "clearml": ("clearml", "clearml"),
    "dvclive": ("dvclive", "dvclive"), "swanlab": ("swanlab", "swanlab"), "trackio": ("trackio", "trackio")}
REPORT_TO = ("none", "jsonl", *TRACKER_PACKAGES)
CURVES = "curves.jsonl"  # the jsonl tracker's file in the run folder


def check_tracker(name: str) -> None:
    """Refuse an unknown tracker, or one whose package is not installed, in one line naming the pip package."""
    if name not in REPORT_TO:
        raise UsageError(f"unknown report_to {name!r} (valid: {', '.join(REPORT_TO)})")
    if name in TRACKER_PACKAGES and importlib.util.find_spec(TRACKER_PACKAGES[name][0]) is None:
        raise UsageError(f"report_to {name} needs the {TRACKER_PACKAGES[name][1]} package: pip install "
                         f"{TRACKER_PACKAGES[name][1]} (or --report-to jsonl, which needs none)")


class JsonLinesTracker(GeneralTracker):
    """`report_to jsonl`: the run's config, then one line per `log` call, appended to the run folder's
    curves.jsonl (a resumed run appends after what it logged before)."""

    name = "jsonl"
    requires_logging_directory = False

    def __init__(self, run_name: str, folder: Path):
        super().__init__()
        self.run_name, self.path = run_name, Path(folder) / CURVES

    @property
    def tracker(self) -> Path:
        return self.path

    def _append(self, record: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    @on_main_process
    def store_init_configuration(self, values: dict) -> None:
        self._append({"run": self.run_name, "config": values})

    @on_main_process
    def log(self, values: dict, step: int | None = None, **kwargs) -> None:
        self._append({"step": step, **values})


def log_with(report_to: str, out: Path):
    """What `Accelerator(log_with=...)` takes for the option: None, our jsonl tracker, or accelerate's name."""
    if report_to == "none":
        return None
    return JsonLinesTracker(out.name, out) if report_to == "jsonl" else report_to


def scalars(values: dict, prefix: str = "") -> dict[str, float]:
    """The finite numbers of a (nested) history entry, names joined with "/"; a list gives one per index."""
    flat = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(scalars(value, f"{name}/"))
        elif isinstance(value, (list, tuple)):
            flat.update(scalars({str(i): v for i, v in enumerate(value)}, f"{name}/"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            flat[name] = float(value)
    return flat


def tracker_config(config: dict) -> dict:
    """A run's flat config as the trackers take it: numbers, text and booleans; None as text."""
    return {k: v if isinstance(v, (bool, int, float, str)) else str(v) for k, v in config.items()}
