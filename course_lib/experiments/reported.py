"""The papers' reported GLUE numbers, to set beside ours (transcribed from the tables named below;
full references in docs/methods.md).

All are BERT-base, and none is a dev-set number of the packaged MiniLM: Kou et al. and Wu et al. report the
GLUE test server, Cui et al. their own test splits. A gap to our dev numbers therefore says little by
itself; the comparison that means something is each method against vanilla within one table.
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Reported:
    value: float  # in percent, as printed in the paper
    metric: str  # our metric name (accuracy, f1, matthews_correlation, pearson, spearmanr)
    source: str  # 'Kou et al. 2020, Table 2'
    split: str  # 'GLUE test server' or 'test'


KOU = "Kou et al. 2020, Tab. 2"
WU = "Wu et al. 2023, Tab. 1"
CUI = "Cui et al. 2019, Tab. 3"
SERVER = "GLUE test server"

# Kou et al.'s columns: CoLA (MCC), SST-2, MRPC F1, STS-B Pearson, QQP F1, MNLI-m, QNLI, RTE.
_KOU_ROWS = {
    "vanilla": (52.1, 93.5, 88.9, 87.1, 71.2, 84.6, 90.5, 66.4),  # Devlin et al.'s BERT row
    "bert-mask": (53.1, 93.7, 88.1, 86.6, 69.8, 84.2, 90.6, 67.2),
    "ssa-co": (52.8, 94.1, 89.0, 87.2, 71.1, 84.6, 90.8, 69.8),
    "ssa-hybrid": (54.1, 94.4, 89.1, 87.2, 71.5, 84.7, 91.3, 70.3),
}
_KOU_TASKS = (("cola", "matthews_correlation"), ("sst2", "accuracy"), ("mrpc", "f1"), ("stsb", "pearson"),
              ("qqp", "f1"), ("mnli", "accuracy"), ("qnli", "accuracy"), ("rte", "accuracy"))

REPORTED: dict[tuple[str, str], list[Reported]] = {}
for _method, _values in _KOU_ROWS.items():
    for (_task, _metric), _value in zip(_KOU_TASKS, _values):
        REPORTED.setdefault((_method, _task), []).append(Reported(_value, _metric, KOU, SERVER))
for _method, _values in {"vanilla": (93.2, 84.1, 90.4, 71.4, 84.7), "asa": (94.1, 85.0, 91.4, 72.3, 86.5)}.items():
    for (_task, _metric), _value in zip((("sst2", "accuracy"), ("mnli", "accuracy"), ("qnli", "accuracy"),
                                         ("qqp", "f1"), ("stsb", "spearmanr")), _values):
        REPORTED.setdefault((_method, _task), []).append(Reported(_value, _metric, WU, SERVER + ", mean of 3 seeds"))
REPORTED.setdefault(("vanilla", "sst2"), []).append(Reported(93.5, "accuracy", CUI, "test"))
REPORTED.setdefault(("ssaf", "sst2"), []).append(Reported(94.7, "accuracy", CUI, "test"))


def reported(method: str, task: str) -> str:
    """'94.4 accuracy (Kou et al. 2020, Tab. 2; GLUE test server)' lines for a method and task, or ''."""
    return "; ".join(f"{r.value:g} {r.metric} ({r.source}; {r.split})" for r in REPORTED.get((method, task), []))
