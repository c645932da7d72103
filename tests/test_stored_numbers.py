"""Numbers stored from another machine hold on every CPU: the tests that read them are marked so CI runs them on
other CPU paths too, and the random weights behind them (tests/portable_draws.py) are drawn alike on every path."""
import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from course_lib.model.bert import BertModel
from course_lib.model.config import BertConfig
from portable_draws import bert_init, normal

TESTS = Path(__file__).resolve().parent
STORED = ("AUTHORS", "REFERENCES")  # names of what a test reads from another machine: the authors' numbers,
#   the assignment's committed references


def marked(node: ast.AST) -> bool:
    return any("stored_numbers" in ast.unparse(d) for d in getattr(node, "decorator_list", []))


def names(node: ast.AST) -> set[str]:
    return {x.id if isinstance(x, ast.Name) else x.attr for x in ast.walk(node)
            if isinstance(x, (ast.Name, ast.Attribute))}


def unmarked_readers(path: Path) -> list[str]:
    """The test functions of a file that read a stored name, themselves or through a helper of the file, but carry
    no stored_numbers mark (nor does their module)."""
    tree = ast.parse(path.read_text())
    if any(isinstance(n, ast.Assign) and "pytestmark" in ast.unparse(n.targets[0])
           and "stored_numbers" in ast.unparse(n.value) for n in tree.body):
        return []
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    readers = {n.name for n in functions if any(name.startswith(STORED) for name in names(n))}
    return [n.name for n in functions if n.name.startswith("test_") and not marked(n)
            and (n.name in readers or names(n) & readers)]


def test_every_test_that_reads_numbers_from_another_machine_is_marked():
    found = {p.name: unmarked_readers(p) for p in sorted(TESTS.glob("test_*.py"))}
    assert {name: tests for name, tests in found.items() if tests} == {}


def test_ci_runs_the_marked_tests_on_the_other_cpu_paths():
    ci = (TESTS.parent / ".ci" / "run").read_text()
    assert "for capability in avx2 default" in ci and "-m stored_numbers" in ci


DRAW = ("import hashlib, sys, torch; sys.path.insert(0, sys.argv[1]); from portable_draws import normal\n"
        "g = torch.Generator().manual_seed(3)\n"
        "print(hashlib.sha256(normal(g, (64, 33), 0.02).numpy().tobytes()).hexdigest())")


@pytest.mark.parametrize("capability", ["avx2", "default"])
def test_portable_draws_are_the_same_bits_on_another_cpu_path(capability):
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability}
    there = subprocess.run([sys.executable, "-c", DRAW, str(TESTS)], env=env, capture_output=True, text=True,
                           check=True).stdout.strip()
    here = subprocess.run([sys.executable, "-c", DRAW, str(TESTS)], capture_output=True, text=True,
                          check=True).stdout.strip()
    assert there == here


def test_portable_normal_has_the_asked_mean_and_spread():
    x = normal(torch.Generator().manual_seed(0), (200_000,), std=0.5, mean=1.0)
    assert x.dtype == torch.float64
    assert abs(x.mean().item() - 1.0) < 5 * 0.5 / 200_000 ** 0.5  # five standard errors
    assert abs(x.std().item() - 0.5) < 0.005
    assert x.min().item() >= 1.0 - 6 * 0.5 and x.max().item() <= 1.0 + 6 * 0.5  # Irwin-Hall's tails end at 6 std


def test_bert_init_redraws_what_bert_drew_and_keeps_what_it_set():
    config = BertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=16, max_position_embeddings=12)
    torch.manual_seed(0)
    model = BertModel(config)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    bert_init(model, seed=1)
    for name, p in model.named_parameters():
        was_set = (before[name] == 0) | (before[name] == 1)
        assert p.dtype == torch.float64
        assert torch.equal(p[was_set], before[name][was_set].double()), name
        assert not torch.isin(p[~was_set], before[name].double()).any(), name
    assert torch.equal(model.embeddings.word.weight[config.pad_token_id], torch.zeros(8, dtype=torch.float64))
    again = bert_init(BertModel(config), seed=1)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters()))
