"""attention-lab's course library: a from-scratch BERT, pluggable attention and the methods built on it."""

__version__ = "0.1.0"

from .bert import BertModel, BertOutput  # noqa: E402
from .config import BertConfig, FinetuneConfig  # noqa: E402
from .errors import UsageError  # noqa: E402
from .weights import load_pretrained  # noqa: E402

__all__ = ["BertConfig", "BertModel", "BertOutput", "FinetuneConfig", "UsageError", "load_pretrained"]
