"""The papers' reported numbers, to set beside ours (transcribed from the tables named below; full references
in docs/methods.md).

None is a dev-set number of the packaged MiniLM: the fine-tuning papers report BERT-base on the GLUE test
server or their own test or dev splits, the CS224N report a BERT-base multitask model on the course's tasks
(SST-5, Quora, SemEval STS), and AG a RoBERTa-base-sized model pre-trained on English Wikipedia. A gap to our
numbers therefore says little by itself; the comparison that means something is each method against its
baseline within one table.
"""
from __future__ import annotations

import dataclasses

from course_lib.lab.glue_score import GLUE_AVERAGE


@dataclasses.dataclass(frozen=True)
class Reported:
    value: float  # as printed in the paper, in percent (a fraction the paper prints is kept x 100)
    metric: str  # our metric name (accuracy, f1, matthews_correlation, pearson, spearmanr, mlm_loss, ...)
    source: str  # 'Kou et al. 2020, Tab. 2'
    split: str  # what was measured: 'GLUE test server', 'test', 'dev, SST-5', ...


KOU = "Kou et al. 2020, Tab. 2"
WU, WU_ROBUST, WU_MASKING = "Wu et al. 2023, Tab. 1", "Wu et al. 2023, Tab. 2", "Wu et al. 2023, Tab. 3"
CUI = "Cui et al. 2019, Tab. 3"
CS224N = "CS224N SSA report, results table"
AG_LOSS, AG_DOWNSTREAM = "Deshpande & Narasimhan 2020, Tab. 3", "Deshpande & Narasimhan 2020, Tab. 4"
SERVER = "GLUE test server"
GLUE = "glue"  # the task key of a number for the whole benchmark (the GLUE average), not for one task

# (kind, method, task) -> numbers. Task "*" matches any task of that kind (pre-training has one row).
REPORTED: dict[tuple[str, str, str], list[Reported]] = {}


def _add(kind: str, methods: dict[str, tuple], columns: tuple, source: str, split: str) -> None:
    """One paper table: methods' rows of values over (task, metric) columns; None is a cell left empty."""
    for method, values in methods.items():
        for (task, metric), value in zip(columns, values):
            if value is not None:
                REPORTED.setdefault((kind, method, task), []).append(Reported(value, metric, source, split))


_add("finetune", {"vanilla": (52.1, 93.5, 88.9, 87.1, 71.2, 84.6, 90.5, 66.4),  # Devlin et al.'s BERT row
                  "bert-mask": (53.1, 93.7, 88.1, 86.6, 69.8, 84.2, 90.6, 67.2),
                  "ssa-co": (52.8, 94.1, 89.0, 87.2, 71.1, 84.6, 90.8, 69.8),
                  "ssa-hybrid": (54.1, 94.4, 89.1, 87.2, 71.5, 84.7, 91.3, 70.3)},
     (("cola", "matthews_correlation"), ("sst2", "accuracy"), ("mrpc", "f1"), ("stsb", "pearson"),
      ("qqp", "f1"), ("mnli", "accuracy"), ("qnli", "accuracy"), ("rte", "accuracy")), KOU, SERVER)
# The same table's "Avg": GLUE's average of its nine task scores (`lab.glue_score`), under the task key GLUE.
_add("finetune", {"vanilla": (78.3,), "bert-mask": (78.3,), "ssa-co": (79.0,), "ssa-hybrid": (79.3,)},
     ((GLUE, GLUE_AVERAGE),), KOU, SERVER)
_add("finetune", {"vanilla": (93.2, 84.1, 90.4, 71.4, 84.7), "asa": (94.1, 85.0, 91.4, 72.3, 86.5)},
     (("sst2", "accuracy"), ("mnli", "accuracy"), ("qnli", "accuracy"), ("qqp", "f1"), ("stsb", "spearmanr")),
     WU, SERVER + ", mean of 3 seeds")
_add("finetune", {"vanilla": (47.8, 62.9), "asa": (49.8, 64.3)}, (("wnut17", "f1"), ("dream", "accuracy")),
     WU, "test, mean of 5 seeds")
_add("finetune", {"vanilla": (48.0, 81.7, 39.7), "asa": (50.4, 87.7, 40.8), "bernoulli-mask": (None, 86.1, 40.5)},
     (("anli", "accuracy"), ("paws_qqp", "accuracy"), ("hellaswag", "accuracy")), WU_ROBUST + " and 3", "dev")
_add("finetune", {"bernoulli-mask": (48.2,)}, (("wnut17", "f1"),), WU_MASKING, "test")
_add("finetune", {"vanilla": (55.2, 93.5, 76.2, 92.0), "ssaf": (56.2, 94.7, 77.3, 93.5)},
     (("sst5", "accuracy"), ("sst2", "accuracy"), ("semeval2013", "accuracy"), ("scitail", "accuracy")), CUI, "test")
_add("finetune", {"vanilla": (80.8, 88.5), "ssaf": (81.6, 88.8)}, (("squad", "exact_match"), ("squad", "f1")),
     CUI, "SQuAD v1.1 dev")
# AG's downstream rows: fine-tuned from the 12-layer models pre-trained with plain MLM or with AG.
_add("finetune", {"vanilla (mlm-pretrained)": (78.9, 86.1, 68.4), "vanilla (ag-pretrained)": (79.0, 86.8, 68.9)},
     (("mnli", "accuracy"), ("qnli", "accuracy"), ("qqp", "f1")), AG_DOWNSTREAM, SERVER + ", 12 layers")
# The CS224N report's multitask model, dev: its heads are SST-5, Quora paraphrase and SemEval STS, so its
# numbers sit beside our heads of the same role (sentiment, paraphrase, similarity) and the overall score. The
# report prints fractions (0.479); they are kept x 100 here, so that every number of a results table is in percent.
_add("multitask", {"ssa-co": (47.9, 69.5, 31.5, 49.6), "vanilla": (50.3, 60.9, 28.8, 46.7)},
     (("sentiment", "accuracy"), ("paraphrase", "accuracy"), ("similarity", "pearson"), ("overall", "overall")),
     CS224N, "dev; SST-5, Quora, SemEval STS")
_add("pretrain", {"mlm": (2.47,), "ag": (2.29,)}, (("*", "mlm_loss"),), AG_LOSS,
     "validation loss, 12 layers, English Wikipedia")

# A multitask head's role in the report, by our task names.
ROLES = {"sst2": "sentiment", "sst5": "sentiment", "qqp": "paraphrase", "paws_qqp": "paraphrase",
         "mrpc": "paraphrase", "rte": "paraphrase", "stsb": "similarity", "overall": "overall"}


def reported(method: str, task: str, kind: str = "finetune") -> str:
    """'94.4 accuracy (Kou et al. 2020, Tab. 2; GLUE test server)' lines for a method and task, or ''."""
    keys = [(kind, method, task), (kind, method, ROLES.get(task, task)), (kind, method, "*")]
    found = next((REPORTED[key] for key in keys if key in REPORTED), [])
    return "; ".join(f"{r.value} {r.metric} ({r.source}; {r.split})" for r in found)
