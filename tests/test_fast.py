"""fast.optimize: the CPU kernels swapped into a plain model change its speed, not its parameters or its function."""
import json
import shutil

import pytest
import torch
from torch import nn

from course_lib.model.heads import SequenceClassifier
from course_lib.model.weights import load_pretrained
from course_lib.fast import optimize
from course_lib.fast.dropout import Dropout
from course_lib.fast.linear import Linear
from course_lib.training.config import FinetuneConfig
from course_lib.training.finetune import finetune


@pytest.fixture
def classifier():
    torch.manual_seed(0)
    encoder, tokenizer = load_pretrained()
    return SequenceClassifier(encoder, 2), tokenizer


def test_optimize_swaps_classes_in_place_and_keeps_every_parameter(classifier):
    model, _ = classifier
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    assert not any(isinstance(m, (Dropout, Linear)) for m in model.modules()), "the reading path is plain PyTorch"
    assert optimize(model) is model
    after = model.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)
    modules = dict(model.named_modules())
    assert type(modules["encoder.layers.0.attention.qkv"]) is Linear
    assert type(modules["encoder.layers.5.ffn.down"]) is Linear
    assert type(modules["encoder.pooler"]) is nn.Linear and type(modules["classifier"]) is nn.Linear  # small ones
    assert type(modules["encoder.layers.0.attention.probs_dropout"]) is Dropout
    assert not [name for name, m in modules.items() if type(m) is nn.Dropout]


def test_optimized_model_computes_the_plain_function(classifier, sentences):
    """Same logits and gradients up to fp32 summation order (oneDNN vs MKL), real weights, padded batch."""
    plain, tokenizer = classifier
    fast = SequenceClassifier(load_pretrained()[0], 2)
    fast.load_state_dict(plain.state_dict())
    optimize(fast)
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    grads = []
    for model in (plain.eval(), fast.eval()):
        logits, _ = model.logits(batch["input_ids"], batch["attention_mask"])
        logits.square().sum().backward()
        grads.append((logits.detach(), {n: p.grad for n, p in model.named_parameters()}))
    torch.testing.assert_close(grads[1][0], grads[0][0], atol=1e-5, rtol=0)
    for name, grad in grads[0][1].items():
        torch.testing.assert_close(grads[1][1][name], grad, atol=1e-5, rtol=1e-3)


def test_no_fast_kernels_trains_the_plain_model_to_the_same_losses(tiny_model_dir, keyword_glue, tmp_path):
    """Without dropout (whose masks the two forms draw differently) both forms train to the same losses; the
    choice is recorded in metrics.json."""
    model_dir = tmp_path / "no_dropout"
    shutil.copytree(tiny_model_dir, model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (model_dir / "config.json").write_text(json.dumps(config))
    losses = {}
    for fast in (True, False):
        cfg = FinetuneConfig(task="sst2", model=str(model_dir), glue_dir=str(keyword_glue), epochs=1, max_len=32,
                             batch_size=16, lr=1e-3, classifier_dropout=0.0, fast_kernels=fast,
                             output_dir=str(tmp_path / f"fast_{fast}"))
        result = finetune(cfg)
        assert result["config"]["fast_kernels"] is fast
        losses[fast] = result["history"][0]["train_loss"]
    torch.testing.assert_close(torch.tensor(losses[False]), torch.tensor(losses[True]), atol=1e-4, rtol=1e-4)
