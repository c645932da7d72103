"""attention-lab's course library: a from-scratch BERT, pluggable attention and the methods built on it.

The public names below are imported lazily, so light modules (metrics, the task registry, plotting) can be
used without paying for torch and transformers at import time. Importing the package first also sets how
torch's OpenMP threads wait (`course_lib.runtime.openmp`), which only takes effect before torch is loaded.
"""

from course_lib.runtime.openmp import use_passive_wait

__version__ = "0.1.0"
use_passive_wait()  # before anything imports torch: libgomp reads it once, at load (course_lib/runtime/openmp.py)

_PUBLIC = {
    "BertConfig": "model.config", "FinetuneConfig": "training.config", "UsageError": "runtime.errors",
    "BertModel": "model.bert", "BertOutput": "model.bert", "load_pretrained": "model.weights",
    "MultitaskConfig": "training.config", "MultitaskBert": "training.multitask",
    "train_multitask": "training.multitask",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name in _PUBLIC:
        import importlib

        return getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
    raise AttributeError(f"module 'course_lib' has no attribute {name!r}")
