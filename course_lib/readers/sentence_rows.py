"""What the sentence family's readers return: one row's text(s) and label (`Example`), and what a preset's label
names say about its head (`LabelSet`). Below the task families, so that the readers (`glue_files`, `sentence_files`,
`cs224n`) and the family (`tasks/sentence.py`) share them without importing each other."""
from __future__ import annotations

from dataclasses import dataclass

SENTENCE = "sentence"  # the family's name in the task registry (course_lib.tasks.registry)


@dataclass(slots=True)  # no __dict__: MNLI's 393k examples take 40 MB less
class Example:
    texts: tuple[str, ...]  # one sentence, or a pair
    label: int | float  # class id, or a score for regression


class LabelSet:
    """What a sentence-family preset's `label_names` say about its head: None is one regression score."""

    label_names: tuple[str, ...] | None

    @property
    def is_regression(self) -> bool:
        return self.label_names is None

    @property
    def num_labels(self) -> int:
        """Width of the classifier output: one score for regression (STS-B)."""
        return 1 if self.label_names is None else len(self.label_names)
