"""Regenerate the authors' numbers that tests/test_asa_authors.py stores (its AUTHORS dict).

They come from the authors' ASA code (Wu et al. 2023), gingasan/adversarialSA at commit
049af10cf9966acd7dcf8990a11127aecf2348a1, which is not part of this repository. Check that commit out (a clone,
or `git archive 049af10 | tar -x`) anywhere, then, from this repository's root:

    .venv/bin/python tests/references/asa_authors.py --authors-checkout /path/to/adversarialSA

and paste the printed AUTHORS over the test's. pytest and CI never run this file (its name does not start with
test_): it needs the authors' checkout.

Each case's model is the test's own `build`. Its tensors are copied into the authors' model of the same task
(modeling/bert.py:712, 790, 873), which then runs one training-mode forward and backward as their training step
does (run_sent_clas.py:791-803), in float64, with dropout 0.

Shims, because this repository's transformers (5.x) lacks parts of the 4.17 API the authors wrote against; none
changes what their code computes here:
- `apply_chunking_to_forward` moved from transformers.modeling_utils to transformers.pytorch_utils (their
  import, modeling/bert.py:5); with chunk size 0 it is a plain call either way.
- `init_weights` now needs bookkeeping made by `post_init`, which their classes never call: it is skipped, since
  every tensor is copied from our model afterwards (and the copy is checked to be complete).
- `get_extended_attention_mask` and `get_head_mask` are gone (their calls, modeling/bert.py:687-689): rebuilt as
  4.17 computed them for an encoder, (1 - mask) * -10000 in the model's dtype shaped (B, 1, 1, L), and no head mask.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import torch
from checkouts import authors_checkout, load_test  # this folder's shared helpers

COMMIT = "049af10cf9966acd7dcf8990a11127aecf2348a1"
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def _extended_mask(self, attention_mask, input_shape, device=None):
    return (1.0 - attention_mask[:, None, None, :].to(self.dtype)) * -10000.0


def authors_modules(checkout: Path):
    """Their modeling/bert.py and modeling/utils.py, imported from the checkout with the shims above."""
    import transformers.modeling_utils
    import transformers.pytorch_utils

    if not hasattr(transformers.modeling_utils, "apply_chunking_to_forward"):
        transformers.modeling_utils.apply_chunking_to_forward = transformers.pytorch_utils.apply_chunking_to_forward
    sys.path.insert(0, str(checkout))
    from modeling import bert, utils

    base = bert.BertPreTrainedModel
    base.init_weights = lambda self: None
    if not hasattr(base, "get_extended_attention_mask"):
        base.get_extended_attention_mask = _extended_mask
    if not hasattr(base, "get_head_mask"):
        base.get_head_mask = lambda self, head_mask, num_layers: [None] * num_layers
    return bert, utils


def authors_model(bert, ours, family: str, test):
    """The authors' model for our model's task, holding our model's tensors, in float64 and training mode."""
    from transformers import BertConfig

    fields = {k: v for k, v in ours.encoder.config.to_dict().items()
              if k not in ("attn_normalizer", "attn_normalizer_params")}
    config = BertConfig(**fields, hidden_act="gelu", num_labels=ours.num_labels)
    task = {test.SENTENCE: bert.AsaBertForSequenceClassification, test.TAGGING: bert.AsaBertForTokenClassification,
            test.MULTIPLE_CHOICE: bert.AsaBertForMultipleChoice}[family]
    theirs = task(config, tau=ours.asa_tau)
    encoder = ours.encoder.state_dict()
    state = {f"bert.{n}": t for n, t in test.ours_to_hf(encoder, len(ours.encoder.layers)).items()}
    for i, adversary in enumerate(ours.adversaries):
        state.update({f"bert.encoder.adversary.{i}.{n}": t for n, t in adversary.state_dict().items()})
    state.update({f"classifier.{n}": t for n, t in ours.classifier.state_dict().items()})
    wanted = {n for n in theirs.state_dict() if not n.endswith("position_ids")}
    state = {n: t for n, t in state.items() if n in wanted}  # a tagger has no pooler
    missing = wanted - set(state)
    assert not missing, f"not copied: {sorted(missing)}"
    theirs.double().load_state_dict(state, strict=False)  # float64 first: our weights are float64 draws
    return theirs.train()


def smallest_score(adversary, hidden, mask) -> float:
    """The smallest |X| over real keys of one adversary call: how far the cut is from a rounding flip."""
    scores = adversary.query(hidden) @ adversary.key(hidden).transpose(-1, -2) / math.sqrt(hidden.shape[-1])
    return scores.detach()[(mask >= 0).expand_as(scores)].abs().min().item()


def run_case(case: str, test, bert, utils) -> dict:
    """One training step of the authors' model on the case's batch: what the test compares."""
    ours = test.build(case)
    theirs = authors_model(bert, ours, test.CASES[case][1], test)
    ids, mask, types, labels = test.inputs(case)
    keeps, margins = [], []
    for adversary in theirs.bert.encoder.adversary:
        adversary.register_forward_hook(lambda module, args, out: keeps.append(out.detach()))
        adversary.register_forward_hook(lambda module, args, out: margins.append(smallest_score(module, *args)))
    torch.manual_seed(0)  # their Gumbel draw, added and subtracted
    outputs = theirs(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels)
    penalty = outputs[0] - outputs[2]
    named = dict(theirs.named_parameters())
    penalty_grads = torch.autograd.grad(penalty, [named[n] for n in test.ADVERSARY_GRADIENTS], retain_graph=True)
    outputs[0].backward()
    print(f"# {case}: smallest adversary |X| over real keys {min(margins):.3g}", file=sys.stderr)
    return {
        "keep": [test.keep_hex(keep) for keep in keeps],
        "logits": outputs[1].flatten().tolist(),
        "adversarial_logits": outputs[3].flatten().tolist(),
        "divergence": utils.divergence(outputs[1], outputs[3]).item(),
        "loss": outputs[2].item(),
        "penalty": penalty.item(),
        "grad": {n: test.summary(named[n].grad) for n in test.GRADIENTS + test.ADVERSARY_GRADIENTS},
        "penalty_grad": {n: test.summary(g) for n, g in zip(test.ADVERSARY_GRADIENTS, penalty_grads)},
    }


def literal(value, indent: int = 0, lead: int = 0, width: int = 120) -> str:
    """`value` as Python source in the repository's style: double quotes, lines within `width`; `lead` is how
    much of the first line comes before it."""
    pad = " " * (indent + 4)
    if isinstance(value, dict):
        items = "".join(f'{pad}"{k}": {literal(v, indent + 4, indent + 4 + len(k) + 4, width)},\n'
                        for k, v in value.items())
        return "{\n" + items + " " * indent + "}"
    if not isinstance(value, list):
        return f'"{value}"' if isinstance(value, str) else repr(value)
    parts = [literal(v, indent + 4, indent + 4, width) for v in value]
    if lead + len(", ".join(parts)) + 3 <= width and all("\n" not in part for part in parts):
        return "[" + ", ".join(parts) + "]"
    lines, line = [], ""
    for part in parts:
        if line and len(pad) + len(line) + len(part) + 2 > width:
            lines.append(line.rstrip())
            line = ""
        line += part + ", "
    lines.append(line.rstrip(", "))
    return "[\n" + "".join(f"{pad}{line}\n" for line in lines) + " " * indent + "]"


def main() -> None:
    checkout = authors_checkout(__doc__, "gingasan/adversarialSA", COMMIT)
    test = load_test("test_asa_authors")
    bert, utils = authors_modules(checkout)
    torch.set_num_threads(1)
    print("AUTHORS = " + literal({case: run_case(case, test, bert, utils) for case in test.CASES}))


if __name__ == "__main__":
    main()
