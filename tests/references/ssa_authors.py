"""Regenerate the authors' numbers that tests/test_ssa_authors.py stores (its AUTHORS dict).

They come from the authors' SSA code (Kou et al. 2020), koukoulala/ssa_BERT at commit
93284bb50ef4b9264ead833d6cc447b9df282a24, which is not part of this repository: modeling.py's `BertForNSP_co`
(SSA-Co) and `BertForNSPAug` (SSA-Hybrid). Check that commit out (a clone, or `git archive 93284bb | tar -x`)
anywhere, then, from this repository's root:

    .venv/bin/python tests/references/ssa_authors.py --authors-checkout /path/to/ssa_BERT

and paste the printed AUTHORS over the test's. pytest and CI never run this file (its name does not start with
test_): it needs the authors' checkout.

Each case's model is the test's own `build`. Its tensors are copied into the authors' model of the same kind
(encoder through `ours_to_hf`; token head dense, LayerNorm and output layer(s); classifier), in float64 with
dropout 0, and the check that every one of their tensors was copied is made. The test's batch then goes through
their forward as their training step calls it (run_ssa.py:514-535): labels=None and token_real_label given, the
task loss (cross-entropy, or MSE for one label) computed outside, loss = (1 - w)·task + w·token with w = 0.3
(their --aug_loss_weight default), then backward. "no_kept_row" is the hybrid shared case at threshold 0.999.

Shims, for today's packages and a CPU; none changes what their code computes here:
- modeling.py imports `cached_path` from their file_utils.py, which needs boto3 and requests (downloads only):
  a stand-in `file_utils` module is registered first; `from_pretrained`, its only user, is never called.
- `BertTokenAug_2` (one output layer per position, --share_weight 0) builds per-position biases with `.cuda()`,
  which fails without a GPU: `Tensor.cuda` returns the tensor itself while their model is built. Those biases are
  plain tensors that their forward never adds (nor does ours: no bias per position), so their device is moot.
- Without apex, modeling.py prints a line on import; it is sent to stderr so stdout stays pasteable.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import sys
import types
from pathlib import Path
from unittest import mock

import torch
import torch.nn.functional as F
from checkouts import authors_checkout, load_test  # this folder's shared helpers

COMMIT = "93284bb50ef4b9264ead833d6cc447b9df282a24"
ROOT = Path(__file__).resolve().parents[2]
AUG_LOSS_WEIGHT = 0.3  # their w: our ssa_target_weight = 1 - w = 0.7
sys.path.insert(0, str(ROOT))

from asa_authors import literal  # noqa: E402  (this folder's writer of AUTHORS literals)
from course_lib.model.weights import ours_to_hf  # noqa: E402


def authors_modeling(checkout: Path):
    """Their modeling.py, imported from the checkout with the shims above."""
    def no_downloads(*args, **kwargs):
        raise RuntimeError("file_utils.cached_path is not available here")

    sys.modules.setdefault("file_utils", types.SimpleNamespace(cached_path=no_downloads))
    spec = importlib.util.spec_from_file_location("ssa_bert_modeling", checkout / "modeling.py")
    module = importlib.util.module_from_spec(spec)
    with contextlib.redirect_stdout(sys.stderr):
        spec.loader.exec_module(module)
    return module


def authors_state(ours, hybrid: bool, shared: bool, max_len: int) -> dict:
    """Our model's tensors under the names of their model's parameters."""
    encoder = ours.encoder
    state = {f"bert.{n}": t for n, t in ours_to_hf(encoder.state_dict(), len(encoder.layers)).items()}
    head = ours.token_head
    state.update({"token_cls.transform.dense.weight": head.dense.weight, "token_cls.transform.dense.bias":
                  head.dense.bias, "token_cls.transform.LayerNorm.weight": head.norm.weight,
                  "token_cls.transform.LayerNorm.bias": head.norm.bias})
    if shared:
        state.update({"token_cls.decoder.weight": head.weight, "token_cls.bias": head.bias})
    else:  # head.weight is (L_max, 2, d): one output layer per position
        state.update({f"token_cls.op.{i}.weight": head.weight[i] for i in range(max_len)})
    classifier = "seq_cls.classifier" if hybrid else "classifier"
    state.update({f"{classifier}.{n}": t for n, t in ours.classifier.state_dict().items()})
    return {n: t.detach().clone() for n, t in state.items()}


def authors_model(modeling, ours, case_args, max_len: int):
    """The authors' model for the case (SSA-Co or SSA-Hybrid) holding our model's tensors, float64, training."""
    _, num_labels, hybrid, shared, beta, threshold = case_args
    cfg = ours.encoder.config
    config = modeling.BertConfig(cfg.vocab_size, hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_hidden_layers,
                                 num_attention_heads=cfg.num_attention_heads, intermediate_size=cfg.intermediate_size,
                                 hidden_act="gelu", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                 max_position_embeddings=cfg.max_position_embeddings,
                                 type_vocab_size=cfg.type_vocab_size)
    args = argparse.Namespace(cls_weight=beta, attention_threshold=threshold, share_weight=int(shared),
                              aug_loss_weight=AUG_LOSS_WEIGHT, max_seq_length=max_len)
    kind = modeling.BertForNSPAug if hybrid else modeling.BertForNSP_co
    with mock.patch.object(torch.Tensor, "cuda", lambda self, *a, **k: self):
        theirs = kind(config, num_labels, args)
    state = authors_state(ours, hybrid, shared, max_len)
    wanted = set(theirs.state_dict())
    assert set(state) == wanted, f"not copied: {sorted(wanted - set(state))}, extra: {sorted(set(state) - wanted)}"
    theirs.double().load_state_dict(state)  # float64 first: our weights are float64 draws
    return theirs.train()


def gradients(theirs, shared: bool) -> dict:
    """The gradients the test compares, from their parameters, in the test's order."""
    g = {n: p.grad for n, p in theirs.named_parameters()}
    qkv = torch.cat([g[f"bert.encoder.layer.0.attention.self.{part}.weight"] for part in ("query", "key", "value")])
    if shared:
        token_out = g["token_cls.decoder.weight"]
    else:  # a position past the batch's length has no gradient in their model, a zero one in ours
        ops = theirs.token_cls.op
        token_out = torch.stack([torch.zeros_like(op.weight) if op.weight.grad is None else op.weight.grad
                                 for op in ops])
    classifier = g["seq_cls.classifier.weight" if hasattr(theirs, "seq_cls") else "classifier.weight"]
    word = g["bert.embeddings.word_embeddings.weight"]
    norms = [word.norm().item(), qkv.norm().item(), g["token_cls.transform.dense.weight"].norm().item(),
             token_out.norm().item(), classifier.norm().item()]
    return {"grad_norms": norms, "grad_word_emb_12": word[12, :4].tolist(),
            "grad_classifier_0": classifier[0, :4].tolist()}


def training_step(theirs, test, num_labels: int):
    """Their forward and loss as run_ssa.py's training loop forms them: (logits, token logits, task, token, loss)."""
    ids, mask, types_, token_labels, labels = test.inputs(num_labels)
    # BertSeqAttention writes zeros into the mask it is given, so it gets its own copy
    logits, token_logits, token_loss = theirs(ids, types_, mask.clone(), labels=None, token_real_label=token_labels)
    if num_labels == 1:
        task = F.mse_loss(logits.view(-1), labels.view(-1))
    else:
        task = F.cross_entropy(logits.view(-1, num_labels), labels.view(-1))
    loss = (1 - AUG_LOSS_WEIGHT) * task + AUG_LOSS_WEIGHT * token_loss
    return logits, token_logits, task, token_loss, loss


def run_case(case_args, test, modeling) -> dict:
    """One training step of the authors' model on the test's batch: what the test stores."""
    ours = test.build(*case_args)
    theirs = authors_model(modeling, ours, case_args, test.MAX_LEN)
    logits, token_logits, task, token, loss = training_step(theirs, test, case_args[1])
    loss.backward()
    return {"logits": logits.flatten().tolist(), "token_logits_row0": token_logits[0].flatten().tolist(),
            "token_logits_norm": token_logits.norm().item(), "loss": loss.item(), "task_loss": task.item(),
            "ssa_loss": token.item(), **gradients(theirs, case_args[3])}


def no_kept_row(test, modeling) -> dict:
    """The hybrid shared case at threshold 0.999, where no token is kept: their logits and total loss."""
    case_args = (1, 2, True, True, 0.5, 0.999)
    theirs = authors_model(modeling, test.build(*case_args), case_args, test.MAX_LEN)
    logits, _, _, _, loss = training_step(theirs, test, 2)
    return {"logits": logits.flatten().tolist(), "loss": loss.item()}


def main() -> None:
    checkout = authors_checkout(__doc__, "koukoulala/ssa_BERT", COMMIT)
    test = load_test("test_ssa_authors")
    modeling = authors_modeling(checkout)
    torch.set_num_threads(1)
    authors = {case: run_case(case_args, test, modeling) for case, case_args in test.CASES.items()}
    authors["no_kept_row"] = no_kept_row(test, modeling)
    print("AUTHORS = " + literal(authors))


if __name__ == "__main__":
    main()
