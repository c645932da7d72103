"""Regenerate the authors' sampler table that tests/test_ssa.py stores (AUTHORS_SAMPLER).

It comes from the authors' SSA code (Kou et al. 2020), koukoulala/ssa_BERT at commit
93284bb50ef4b9264ead833d6cc447b9df282a24, which is not part of this repository: data_util.py's `aug_func`, whose
quartile loop calls `rand_rm` and `rm_sub` to pick the wordpieces a probe masks. Check that commit out (a clone,
or `git archive 93284bb | tar -x`) anywhere, then, from this repository's root:

    .venv/bin/python tests/references/ssa_sampler.py --authors-checkout /path/to/ssa_BERT

and paste the printed AUTHORS_SAMPLER over the test's. pytest and CI never run this file (its name does not start
with test_): it needs the authors' checkout. It takes about half a minute.

For each segment length n, `aug_func` itself draws 20,000 probes of one single-segment example of n wordpieces
(cnt = 20,000, num_no_aug = 0, so every copy is a probe) with their defaults aug_threshold 0.1 and
rm_threshold 0.7. A row is (the share of the n·20,000 wordpieces masked, the share of probes that mask nothing),
the masked share rounded to 6 decimals. The tokenizer is a stand-in that splits on spaces: the sampler reads
only the number of wordpieces.

The draws come from numpy's global generator, seeded once with 0 and then run through the lengths
1, 2, 3, 4, 5, 6, 8, 10, 20 in that order; rows 4 and 8 are drawn but not stored (they go to stderr). Each row
therefore depends on the draws before it: re-seeding per length, or leaving 4 and 8 out, gives other values
within Monte Carlo error (the standard error of each masked share goes to stderr: 7e-4 at n = 20).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import logging
import math
import sys
from pathlib import Path

import numpy

from ag_authors import wrapped  # this folder's writer of wrapped literals
from checkouts import authors_checkout  # this folder's shared helpers

COMMIT = "93284bb50ef4b9264ead833d6cc447b9df282a24"
DRAWN = (1, 2, 3, 4, 5, 6, 8, 10, 20)  # every length drawn, in this order, from one seeded stream
STORED = (1, 2, 3, 5, 6, 10, 20)  # the lengths tests/test_ssa.py stores
DRAWS = 20_000
SEED = 0


class SpaceTokenizer:
    """Stands in for their BERT tokenizer: one wordpiece per space-separated word."""

    def tokenize(self, text: str) -> list[str]:
        return text.split()

    def convert_tokens_to_ids(self, tokens: list[str]) -> list[int]:
        return [0] * len(tokens)


def authors_data_util(checkout: Path):
    """Their data_util.py as a module, loaded from its file (it configures logging at INFO: turned down after)."""
    spec = importlib.util.spec_from_file_location("ssa_bert_data_util", checkout / "data_util.py")
    module = importlib.util.module_from_spec(spec)
    with contextlib.redirect_stdout(sys.stderr):
        spec.loader.exec_module(module)
    logging.getLogger().setLevel(logging.WARNING)
    return module


def row(data_util, n: int, draws: int) -> tuple[float, float, float]:
    """(masked share, empty-probe share, standard error of the masked share) of `draws` probes of length n."""
    example = data_util.InputExample(guid=0, text_a=" ".join(f"w{i}" for i in range(n)), label="0")
    args = argparse.Namespace(aug_threshold=0.1, rm_threshold=0.7)  # their run_ssa.py defaults
    _, probes = data_util.aug_func([example], ["0"], SpaceTokenizer(), draws, 0, args, SEED, n + 2,
                                   "classification", 0)
    masked = [set(probe.rand_index_a) for probe in probes]  # the positions their features set to [MASK]
    assert len(masked) == draws and all(m <= set(range(n)) for m in masked)
    share = sum(map(len, masked)) / (draws * n)  # as the test counts it
    spread = math.sqrt(sum((len(m) / n - share) ** 2 for m in masked) / (draws - 1) / draws)
    return share, sum(not m for m in masked) / draws, spread


def main() -> None:
    checkout = authors_checkout(__doc__, "koukoulala/ssa_BERT", COMMIT)
    data_util = authors_data_util(checkout)
    numpy.random.seed(SEED)
    table = {}
    for n in DRAWN:
        share, empty, spread = row(data_util, n, DRAWS)
        table[n] = (round(share, 6), empty)
        print(f"# n = {n}: masked share {share!r} (standard error {spread:.2g}), empty {empty!r}"
              f"{'' if n in STORED else ', drawn but not stored'}", file=sys.stderr)
    start = "AUTHORS_SAMPLER = "
    print(start + wrapped([f"{n}: {table[n]!r}" for n in STORED], len(start), "{}"))


if __name__ == "__main__":
    main()
