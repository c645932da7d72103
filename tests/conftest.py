import os
from pathlib import Path

import pytest
import torch

from course_lib.weights import default_model_dir


@pytest.fixture(scope="session")
def glue_dir() -> Path:
    path = os.environ.get("GLUE_DIR")
    if not path or not Path(path).is_dir():
        pytest.skip("needs real GLUE data: set GLUE_DIR to a folder in the GLUE layout (CI sets it)")
    return Path(path)


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
