import atexit
import os
import random
import shutil
import tempfile
from pathlib import Path

import course_lib  # noqa: F401  first: it sets OpenMP's wait policy before torch loads (course_lib/runtime/openmp.py)
import pytest
import torch

from course_lib.readers import local_data
from course_lib.model.model_folder import default_model_dir
from sentiment_words import BAD, FILLER, GOOD

# The tests' encoded splits go to a cache of their own (each pytest process one), not the user's; runs started in
# subprocesses and the notebooks' kernels inherit it.
if "ATTENTION_LAB_CACHE" not in os.environ:
    os.environ["ATTENTION_LAB_CACHE"] = tempfile.mkdtemp(prefix="attention-lab-test-cache-")
    atexit.register(shutil.rmtree, os.environ["ATTENTION_LAB_CACHE"], True)

@pytest.fixture(scope="session")
def glue_dir() -> Path:
    """The real GLUE folder: $GLUE_DIR, else the repository's data/glue. Never skipped: the data is shipped."""
    path = local_data.data_folder("GLUE_DIR")
    assert path is not None and path.is_dir(), f"no GLUE data: data/glue is missing from the checkout ({path})"
    return path


@pytest.fixture
def no_shipped_data(monkeypatch, tmp_path):
    """The package as a wheel installs it, without the repository's data/: presets go to their variable or the
    hub. Tests of the hub path and of the generated fallbacks use it."""
    monkeypatch.setattr(local_data, "REPO_DATA", tmp_path / "no-repository-data")


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    return default_model_dir()


@pytest.fixture(scope="session")
def sentences() -> list[str]:
    """Real sentences of mixed lengths, so batches carry padding."""
    return [
        "The film is a charming, funny and ultimately moving portrait of a family.",
        "Dull.",
        "It never quite decides whether it wants to be a thriller or a comedy, and ends up as neither.",
        "A masterpiece of quiet observation.",
    ]


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)




@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, minilm_dir) -> Path:
    """A 2-layer, d=32 BERT with random weights and the real uncased vocabulary: seconds per run."""
    import transformers

    folder = tmp_path_factory.mktemp("tiny_bert")
    torch.manual_seed(0)
    config = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=64)
    transformers.BertModel(config).save_pretrained(folder)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (folder / name).write_bytes((minilm_dir / name).read_bytes())
    return folder


@pytest.fixture(scope="session")
def keyword_glue(tmp_path_factory) -> Path:
    """An SST-2-shaped folder whose label is carried by one sentiment word among filler words."""
    root = tmp_path_factory.mktemp("glue")
    rng = random.Random(0)
    (root / "SST-2").mkdir()
    for split, n in (("train", 192), ("dev", 64)):
        lines = ["sentence\tlabel"]
        for _ in range(n):
            label = rng.randint(0, 1)
            words = rng.choices(FILLER, k=rng.randint(3, 12))
            words.insert(rng.randint(0, len(words)), rng.choice(GOOD if label else BAD))
            lines.append(f"{' '.join(words)}\t{label}")
        (root / "SST-2" / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    return root
