"""Regenerate the numbers that tests/test_asa.py's `test_the_regression_divergence_matches_the_authors_code` stores.

They come from the authors' ASA code (Wu et al. 2023), gingasan/adversarialSA at commit
049af10cf9966acd7dcf8990a11127aecf2348a1, function `divergence` in modeling/utils.py, which is not part of this
repository. Check that commit out (a clone, or `git archive 049af10 | tar -x`) anywhere, then, from this
repository's root:

    .venv/bin/python tests/references/asa_divergence.py --authors-checkout /path/to/adversarialSA

and paste the printed value and the two gradient lists over the test's literals. pytest and CI never run this file
(its name does not start with test_): it needs the authors' checkout.

Their `divergence` is called once on the test's two (B, 1) float64 score columns, the clean and the adversarial
ones, and the result is backpropagated to both. modeling/utils.py imports torch alone, so it is loaded by its path
(no transformers, no shims) and the rest of their package is not imported.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch
from checkouts import authors_checkout  # this folder's shared helpers

COMMIT = "049af10cf9966acd7dcf8990a11127aecf2348a1"
# The test's scores (tests/test_asa.py): five rows of one regression output, clean and adversarial.
CLEAN = [[0.5], [1.25], [-0.375], [2.0], [3.5]]
ADVERSARIAL = [[0.75], [1.0], [0.125], [2.5], [3.0]]


def authors_utils(checkout: Path):
    """Their modeling/utils.py as a module, loaded from its file."""
    spec = importlib.util.spec_from_file_location("adversarialSA_utils", checkout / "modeling" / "utils.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    checkout = authors_checkout(__doc__, "gingasan/adversarialSA", COMMIT)
    utils = authors_utils(checkout)
    clean = torch.tensor(CLEAN, dtype=torch.float64, requires_grad=True)
    adversarial = torch.tensor(ADVERSARIAL, dtype=torch.float64, requires_grad=True)
    value = utils.divergence(clean, adversarial)
    value.backward()
    print(f"value = {value.item()!r}")
    print(f"authors_clean_grad = {clean.grad.view(-1).tolist()!r}")
    print(f"authors_adversarial_grad = {adversarial.grad.view(-1).tolist()!r}")


if __name__ == "__main__":
    main()
