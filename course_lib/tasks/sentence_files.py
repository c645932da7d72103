"""The sentence family from any CSV, TSV or JSONL file, and the papers' other sentence presets. Being written."""
from __future__ import annotations


def custom(cfg):
    raise NotImplementedError("being written")


PRESETS: tuple = ()
