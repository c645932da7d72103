"""Regenerate the authors' numbers that tests/test_ag_authors.py stores (its AUTHORS and AUTHORS_SCHEDULE dicts).

They come from the authors' AG code (Deshpande & Narasimhan 2020), ameet-1997/AttentionGuidance at commit
8e1e6c3855125fe8f1485fbe57d51285edebfade, which is not part of this repository: the methods
`create_pos_attn_patterns`, `compute_ag_loss` and `linear_schedule_for_scale` of `TrainerAG` in
attention_guidance/src/transformers/trainer_ag.py. Check that commit out (a clone, or
`git archive 8e1e6c3 attention_guidance | tar -x`: only that file is read) anywhere, then, from this repository's root:

    .venv/bin/python tests/references/ag_authors.py --authors-checkout /path/to/AttentionGuidance

and paste the printed AUTHORS and AUTHORS_SCHEDULE over the test's. pytest and CI never run this file (its name
does not start with test_): it needs the authors' checkout.

Their three methods run on the test's own float64 attention maps (`attention_maps`, two layers) for each head-type
string the test stores: the loss, the loss of each layer alone, the loss times α_0 = 10 at step 0 and the gradient
of that scaled loss w.r.t. both layers' maps, as their training step forms it (trainer_ag.py, `_training_step`).

Shim: trainer_ag.py sits inside their bundled copy of transformers (a 2020 fork), whose package import pulls in
sentencepiece, apex-era modules and old tokenizers, and fails with today's packages. So the three methods are taken
out of `TrainerAG` with `ast`, compiled from their file's text unchanged, with torch and numpy as their globals
(all they use), and bound to a stand-in trainer holding only the two attributes they read, `t_total` and
`global_step`. Their targets are built in torch's default float32; 0 and 1 are exact there, so the loss is the
float64 loss of the maps (the same numbers to the last bit with a float64 default).
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import numpy
import torch
from checkouts import authors_checkout, load_test  # this folder's shared helpers

COMMIT = "8e1e6c3855125fe8f1485fbe57d51285edebfade"
ROOT = Path(__file__).resolve().parents[2]
TRAINER = Path("attention_guidance", "src", "transformers", "trainer_ag.py")
METHODS = ("create_pos_attn_patterns", "compute_ag_loss", "linear_schedule_for_scale")
SCHEDULE_TOTAL = 50_000  # t_total of AUTHORS_SCHEDULE
sys.path.insert(0, str(ROOT))


def authors_trainer(checkout: Path, t_total: int, global_step: int):
    """A stand-in TrainerAG carrying their three methods, compiled from trainer_ag.py's text (see the shim)."""
    path = checkout / TRAINER
    tree = ast.parse(path.read_text(), filename=str(path))
    trainer = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "TrainerAG")
    found = [node for node in trainer.body if isinstance(node, ast.FunctionDef) and node.name in METHODS]
    assert sorted(node.name for node in found) == sorted(METHODS), "trainer_ag.py lacks one of the methods"
    namespace = {"torch": torch, "np": numpy}
    exec(compile(ast.Module(body=found, type_ignores=[]), str(path), "exec"), namespace)
    stand_in = type("TrainerAGMethods", (), {name: namespace[name] for name in METHODS})()
    stand_in.t_total, stand_in.global_step = t_total, global_step
    return stand_in


def run_head_types(checkout: Path, head_types: str, test) -> dict:
    """One head assignment: their loss, per-layer losses, scaled loss and its gradient w.r.t. the maps."""
    trainer = authors_trainer(checkout, t_total=100_000, global_step=0)
    maps = test.attention_maps()
    loss = trainer.compute_ag_loss(None, maps, "cpu", head_types)
    per_layer = tuple(trainer.compute_ag_loss(None, [m.detach()], "cpu", head_types).item() for m in maps)
    scaled = loss * test.SCALE * trainer.linear_schedule_for_scale()
    scaled.backward()
    grad = torch.stack([m.grad for m in maps])  # (layers, B, H, L, L)
    return {"ag_loss": loss.item(), "per_layer": per_layer, "scaled_loss": scaled.item(),
            "grad_norm": grad.norm().item(), "grad_sum": grad.sum().item(),
            "grad_picks": tuple(grad[p].item() for p in test.PICKS)}


def schedule(checkout: Path, steps) -> dict:
    """Their schedule factor at each step of a 50,000-step run; and at 14,999 of a 15,000-step run, on stderr."""
    factors = {step: authors_trainer(checkout, SCHEDULE_TOTAL, step).linear_schedule_for_scale() for step in steps}
    short = authors_trainer(checkout, 15_000, 14_999).linear_schedule_for_scale()
    print(f"# t_total 15000, step 14999: factor {short!r} (test_run_shorter_than_plateau_never_decays)",
          file=sys.stderr)
    return factors


def wrapped(parts, indent: int, brackets: str = "()", width: int = 120) -> str:
    """Source parts in brackets, lines within `width`, continuation lines aligned one past the opening bracket
    (which sits at column `indent`)."""
    lines, line = [], ""
    for part in parts:
        if line and indent + 1 + len(line) + len(part) + 2 > width:
            lines.append(line.rstrip())
            line = ""
        line += part + ", "
    return brackets[0] + ("\n" + " " * (indent + 1)).join(lines + [line.rstrip(", ")]) + brackets[1]


def literal(results: dict) -> str:
    """AUTHORS as the test writes it: a dict of head-type strings, floats and tuples of floats."""
    out = ["AUTHORS = {"]
    for head_types, values in results.items():
        out.append(f'    "{head_types}": {{')
        for key, value in values.items():
            start = f'        "{key}": '
            text = wrapped(map(repr, value), len(start)) if isinstance(value, tuple) else repr(value)
            out.append(f"{start}{text},")
        out.append("    },")
    return "\n".join(out + ["}"])


def main() -> None:
    checkout = authors_checkout(__doc__, "ameet-1997/AttentionGuidance", COMMIT)
    test = load_test("test_ag_authors")
    torch.set_num_threads(1)
    print(literal({head_types: run_head_types(checkout, head_types, test) for head_types in test.AUTHORS}))
    print()
    factors = schedule(checkout, test.AUTHORS_SCHEDULE)
    start = "AUTHORS_SCHEDULE = "
    print(start + wrapped([f"{step}: {factor!r}" for step, factor in factors.items()], len(start), "{}"))


if __name__ == "__main__":
    main()
