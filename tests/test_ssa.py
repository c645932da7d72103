"""SSA (Kou et al. 2020): the pooling identities, the label generator on a stub classifier, the schedule."""
import math
import random

import pytest
import torch

from course_lib.model.bert import BertModel
from course_lib.model.config import BertConfig
from course_lib.model.heads import SequenceClassifier
from course_lib.methods.ssa import (IGNORE, SSAClassifier, aug_ratio, authors_mask_positions, bert_mask_epoch_features,
                                   mask_positions, ssa_epoch_features)

CLS, SEP, PAD, MASK, FUNNY = 101, 102, 0, 103, 7


def tiny_ssa(hybrid=True, **kw):
    torch.manual_seed(0)
    enc = BertModel(BertConfig(vocab_size=200, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                               intermediate_size=64, max_position_embeddings=32))
    return SSAClassifier(enc, 2, 0.1, [CLS, SEP, PAD], max_len=32, hybrid=hybrid, **kw).eval()


def batch():
    ids = torch.tensor([[CLS, 11, 12, 13, 14, SEP, PAD, PAD], [CLS, 21, 22, SEP, 23, 24, 25, SEP]])
    return ids, (ids != PAD).long()


def test_beta_one_is_the_plain_head_without_dropout():
    model = tiny_ssa(ssa_cls_weight=1.0)
    ids, mask = batch()
    plain = SequenceClassifier(model.encoder, 2, dropout=0.0).eval()
    plain.classifier = model.classifier
    torch.testing.assert_close(model(ids, mask).logits, plain(ids, mask).logits)


def test_pooling_weights():
    model = tiny_ssa(ssa_cls_weight=0.0, ssa_threshold=0.3)
    ids, mask = batch()
    hidden = torch.randn(2, 8, 32)
    pooled = torch.randn(2, 32)
    equal = torch.full((2, 8), 0.6)  # beta = 0 and equal scores: the mean of H over kept tokens
    kept = torch.tensor([[0, 1, 1, 1, 1, 0, 0, 0], [0, 1, 1, 0, 1, 1, 1, 0]], dtype=torch.bool)
    expected = torch.stack([hidden[b][kept[b]].mean(0) for b in range(2)])
    torch.testing.assert_close(model.pool(hidden, pooled, equal, ids, mask), expected)
    scores = torch.tensor([[0.9, 0.95, 0.2, 0.31, 0.8, 0.9, 0.9, 0.9], [0.5, 1.0, 0.3, 0.9, 0.35, 0.7, 0.99, 0.1]])
    real = mask.bool() & ~torch.isin(ids, torch.tensor([CLS, SEP, PAD]))
    keep = real & (scores >= 0.3)
    weights = torch.softmax(scores + (~keep) * -1e4, -1)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2))
    assert (weights[~keep] < 1e-30).all()
    ratio = weights[0][keep[0]].max() / weights[0][keep[0]].min()
    assert ratio <= math.exp(1 - 0.3) + 1e-6
    context = torch.einsum("bl,bld->bd", weights, hidden)
    torch.testing.assert_close(model.pool(hidden, pooled, scores, ids, mask), context)


def test_a_row_without_kept_tokens_falls_back_to_the_pooled_output():
    model = tiny_ssa(ssa_cls_weight=0.5, ssa_threshold=0.3)
    ids, mask = batch()
    hidden, pooled = torch.randn(2, 8, 32), torch.randn(2, 32)
    out = model.pool(hidden, pooled, torch.zeros(2, 8), ids, mask)  # every score below the threshold
    torch.testing.assert_close(out, pooled)


def test_beta_is_exact_in_a_float64_model():
    """beta = 0.9 is 0.9 in float64, not float32's 0.89999998 (the cross-implementation test compares to 1e-15)."""
    model = tiny_ssa(ssa_cls_weight=0.9, ssa_threshold=0.0).double()
    ids, mask = batch()
    hidden, pooled = torch.randn(2, 8, 32, dtype=torch.float64), torch.randn(2, 32, dtype=torch.float64)
    equal = torch.full((2, 8), 0.5, dtype=torch.float64)
    context = model.pool(hidden, torch.zeros_like(pooled), equal, ids, mask) / (1 - 0.9)
    assert torch.equal(model.pool(hidden, pooled, equal, ids, mask), 0.9 * pooled + (1 - 0.9) * context)


def feature(tokens, label=1):
    ids = [CLS, *tokens, SEP]
    return {"input_ids": ids, "token_type_ids": [0] * len(ids), "label": label}


def funny_stub(feats):
    """'Positive iff the token funny is present': a classifier whose reasons are known exactly."""
    return [int(FUNNY in f["input_ids"]) for f in feats]


def test_label_generator_on_a_stub_classifier():
    rng = random.Random(0)
    feats = [feature([rng.randrange(20, 90) for _ in range(12)] + [FUNNY], label=1) for _ in range(40)]
    feats += [feature([rng.randrange(20, 90) for _ in range(12)], label=0) for _ in range(40)]
    special = {CLS, SEP, PAD}
    code, stats = ssa_epoch_features(feats, funny_stub, epoch=2, seed=0, special_ids=special, mask_id=MASK,
                                     is_regression=False, label_mode="code")
    assert len(code) == len(feats) and stats["aug_ratio"] == 0.4
    probed = [f for f in code if 0 in f["token_labels"]]
    assert probed, "some probes should qualify"
    for f in probed:
        zeros = [i for i, y in enumerate(f["token_labels"]) if y == 0]
        assert all(f["input_ids"][i] != FUNNY for i in zeros)  # masking 'funny' flips: never labelled 0
        assert MASK not in f["input_ids"]  # training input is the original sentence
        assert f["token_labels"][0] == IGNORE and f["token_labels"][-1] == IGNORE
        assert set(f["token_labels"][1:-1]) == {0, 1}
    paper, _ = ssa_epoch_features(feats, funny_stub, epoch=2, seed=0, special_ids=special, mask_id=MASK,
                                  is_regression=False, label_mode="paper")
    flipped = [f for f in paper if 1 in f["token_labels"]]
    assert flipped  # the paper labels a flipping probe's masked tokens 1: 'funny' is always among them
    assert all(f["token_labels"][f["input_ids"].index(FUNNY)] == 1 for f in flipped)
    held = [f for f in paper if 0 in f["token_labels"]]
    assert held and all(f["token_labels"][f["input_ids"].index(FUNNY)] == IGNORE for f in held
                        if FUNNY in f["input_ids"])  # a probe that held never masked 'funny'
    assert all(set(f["token_labels"]) <= {IGNORE, 0, 1} for f in paper)
    wrong = [{**f, "label": 1 - f["label"]} for f in feats]  # a stub that always errs yields no probes
    none, stats = ssa_epoch_features(wrong, funny_stub, epoch=2, seed=0, special_ids=special, mask_id=MASK,
                                     is_regression=False)
    assert stats["labelled"] == 0 and all(0 not in f["token_labels"] for f in none)


def test_sampler_bounds_and_spans():
    rng = random.Random(1)
    assert mask_positions([range(1, 30)], rng, trigger_p=0.0) == set()
    for n in (1, 2, 5, 17, 50):
        seg = range(1, n + 1)
        for _ in range(50):
            masked = mask_positions([seg], rng)
            assert masked <= set(seg)
    fractions = [len(mask_positions([range(0, 40)], rng)) / 40 for _ in range(400)]
    assert 0.08 < sum(fractions) / len(fractions) < 0.2  # the code's ~10-16%, not the paper's 0.3


def test_schedule_and_epoch_size():
    assert [aug_ratio(e) for e in range(6)] == [0.0, 0.2, 0.4, 0.6, 0.8, 0.8]
    feats = [feature(list(range(20, 35))) for _ in range(50)]
    for epoch in range(5):
        out, stats = bert_mask_epoch_features(feats, epoch, 0, {CLS, SEP, PAD}, MASK)
        assert len(out) == 50 and stats["labelled"] == int(50 * aug_ratio(epoch))
        assert sum(MASK in f["input_ids"] for f in out) <= stats["labelled"]


def test_training_loss_mixes_task_and_token_losses():
    model = tiny_ssa(hybrid=False, ssa_target_weight=0.7).train()
    ids, mask = batch()
    labels = torch.tensor([1, 0])
    token_labels = torch.where(mask.bool() & ~torch.isin(ids, torch.tensor([CLS, SEP])), 1, IGNORE)
    torch.manual_seed(0)
    out = model(ids, mask, labels=labels, token_labels=token_labels)
    torch.manual_seed(0)
    task_only = model(ids, mask, labels=labels)
    expected = 0.7 * task_only.loss + 0.3 * out.stats["ssa_loss"][0]
    torch.testing.assert_close(out.loss, expected)


def test_first_epoch_without_token_loss_only_changes_the_unprobed_epoch():
    rng = random.Random(0)
    feats = [feature([rng.randrange(20, 90) for _ in range(12)] + [FUNNY], label=1) for _ in range(40)]
    special = {CLS, SEP, PAD}
    kwargs = dict(seed=0, special_ids=special, mask_id=MASK, is_regression=False, label_mode="code")
    ones, _ = ssa_epoch_features(feats, funny_stub, epoch=0, **kwargs)
    assert all(set(f["token_labels"][1:-1]) == {1} for f in ones)  # the authors' all-ones first epoch
    quiet, stats = ssa_epoch_features(feats, funny_stub, epoch=0, first_epoch_loss=False, **kwargs)
    assert stats["labelled"] == 0 and all(set(f["token_labels"]) == {IGNORE} for f in quiet)  # no token loss
    later = [ssa_epoch_features(feats, funny_stub, epoch=2, first_epoch_loss=flag, **kwargs)[0]
             for flag in (True, False)]
    assert later[0] == later[1]  # probed epochs are untouched


def test_bf16_probe_runs_only_the_probes_in_bfloat16(tiny_model_dir, keyword_glue, tmp_path):
    """--ssa-probe-bf16: every probe's matmuls run in bfloat16, the training step after it in fp32."""
    from accelerate import Accelerator

    from course_lib.tasks import glue, sentence
    from course_lib.training.config import FinetuneConfig
    from course_lib.training.finetune import epoch_features, predict
    from course_lib.training.run import resolve
    from course_lib.training.task_model import build_classifier, load_encoder

    dtypes = {}
    for bf16 in (False, True):
        cfg = FinetuneConfig.from_dict(dict(model=str(tiny_model_dir), method="ssa-co", max_len=32,
                                            ssa_probe_bf16=bf16, glue_dir=str(keyword_glue)))
        run = resolve(cfg)
        encoder, tokenizer = load_encoder(run)
        model = build_classifier(run, encoder, tokenizer)
        train = sentence.encode_examples(glue.load_split(run.task, "train", str(keyword_glue)), tokenizer, cfg.max_len)
        own = predict(model, train, 64, Accelerator(cpu=True), tokenizer.pad_token_id, run.task,
                      run.family).long().tolist()
        train = [{**f, "label": y} for f, y in zip(train, own)]  # gold = the model's own class: every one is probed
        seen = []
        model.encoder.layers[0].ffn.up.register_forward_hook(lambda module, args, out: seen.append(out.dtype))
        _, stats = epoch_features(run, 1, train, model, tokenizer, Accelerator(cpu=True), tmp_path / str(bf16))
        assert stats["probes"] > 0
        dtypes[bf16] = set(seen)
        seen.clear()
        batch = sentence.collate(train[:4], tokenizer.pad_token_id)
        model.train()(batch["input_ids"], batch["attention_mask"], labels=batch["labels"])
        assert set(seen) == {torch.float32}  # no autocast left behind for training
    assert dtypes == {False: {torch.float32}, True: {torch.bfloat16}}


# Masked share of wordpieces and share of probes that mask nothing, per segment length, from the authors' sampler:
# the quartile loop of `aug_func` calling their `rand_rm` and `rm_sub` (koukoulala/ssa_BERT, commit 93284bb,
# data_util.py, aug_threshold 0.1, rm_threshold 0.7), 20,000 draws per length from one numpy stream seeded 0 that
# runs through lengths 1-6, 8, 10, 20 in order (4 and 8 not stored), in a scratch folder outside this repository.
# Regenerated by `.venv/bin/python tests/references/ssa_sampler.py --authors-checkout /path/to/ssa_BERT`.
AUTHORS_SAMPLER = {1: (0.0, 1.0), 2: (0.052, 0.896), 3: (0.033883, 0.89835), 5: (0.04532, 0.80655),
                   6: (0.100833, 0.5305), 10: (0.10888, 0.35055), 20: (0.137605, 0.12015)}


@pytest.mark.stored_numbers
def test_the_authors_sampler_masks_as_their_code():
    rng = random.Random(0)
    for n, (share, empty) in AUTHORS_SAMPLER.items():
        draws = [authors_mask_positions([range(3, 3 + n)], rng) for _ in range(20_000)]
        assert all(d <= set(range(3, 3 + n)) for d in draws)
        assert sum(map(len, draws)) / (20_000 * n) == pytest.approx(share, abs=0.006), n
        assert sum(not d for d in draws) / 20_000 == pytest.approx(empty, abs=0.012), n


def test_probes_that_mask_nothing_are_kept_as_all_ones_copies_without_a_forward_pass():
    """Short sentences: the authors' sampler leaves most probes empty; they join as all-ones copies (their code),
    and only masked copies are run. The rounded sampler drops empty probes."""
    rng = random.Random(0)
    feats = [feature([rng.randrange(20, 90) for _ in range(3)], label=0) for _ in range(60)]
    calls = []

    def stub(batch):
        calls.append(batch)
        return funny_stub(batch)

    kwargs = dict(epoch=4, seed=0, special_ids={CLS, SEP, PAD}, mask_id=MASK, is_regression=False)
    out, stats = ssa_epoch_features(feats, stub, sampler="authors", **kwargs)
    probe_calls = [f for batch in calls for f in batch if MASK in f["input_ids"]]
    assert stats["labelled"] == int(60 * 0.8) and stats["probes"] > len(probe_calls)
    ones = [f for f in out[:stats["labelled"]] if set(f["token_labels"][1:-1]) == {1}]
    assert len(ones) > stats["labelled"] / 2  # mostly empty probes, labelled all ones
    _, rounded = ssa_epoch_features(feats, funny_stub, sampler="rounded", **kwargs)
    assert rounded["probes"] >= rounded["labelled"]
    paper, stats = ssa_epoch_features(feats, funny_stub, sampler="authors", label_mode="paper", **kwargs)
    assert stats["labelled"] > 0  # paper labels: a probe that masks nothing labels nothing, so none is counted
    assert all(any(label != IGNORE for label in f["token_labels"]) for f in paper[:stats["labelled"]])


@pytest.mark.parametrize("init", ["bert", "torch"])
def test_token_head_init(init):
    head = tiny_ssa(hybrid=False, ssa_share_weight=False, ssa_head_init=init).token_head
    if init == "bert":  # the authors': N(0, 0.02) dense layer, zero bias, every position its own draw
        assert head.dense.bias.abs().sum() == 0
        assert head.dense.weight.std().item() == pytest.approx(0.02, rel=0.1)
        assert not torch.equal(head.weight[0], head.weight[1])
    else:  # PyTorch's default Linear init, one output draw copied to every position
        assert head.dense.bias.abs().sum() > 0
        assert torch.equal(head.weight[0], head.weight[1])
    assert head.weight.std().item() == pytest.approx(0.02, rel=0.2)


def test_the_token_head_starts_as_the_authors_by_default():
    """Every default that picks the token head's init (the run configs' options, `SSAClassifier`, `TokenHead`)
    gives the authors' (ssa_BERT's init_bert_weights): a dense layer N(0, 0.02) with zero bias and each position's
    output layer its own N(0, 0.02) draw. PyTorch's default init has a nonzero bias, a dense std near 0.1 and one
    output draw for every position, so a default switched to it fails here."""
    from course_lib.methods.ssa import TokenHead
    from course_lib.training.config import FinetuneConfig, MultitaskConfig

    configs = [FinetuneConfig.from_dict({"method": m}) for m in ("ssa-co", "ssa-hybrid")] + [MultitaskConfig(ssa="all")]
    torch.manual_seed(0)
    heads = [TokenHead(32, 32, shared=False, init=cfg.options.ssa_head_init) for cfg in configs]
    heads += [TokenHead(32, 32, shared=False), tiny_ssa(hybrid=False, ssa_share_weight=False).token_head]
    for head in heads:
        assert head.dense.bias.abs().sum() == 0 and head.bias.abs().sum() == 0
        assert head.dense.weight.mean().item() == pytest.approx(0.0, abs=0.003)
        assert head.dense.weight.std().item() == pytest.approx(0.02, rel=0.1)
        assert head.weight.std().item() == pytest.approx(0.02, rel=0.1)
        assert not any(torch.equal(head.weight[0], head.weight[i]) for i in range(1, head.weight.shape[0]))


def test_every_ssa_run_masks_its_probes_with_the_authors_sampler_by_default():
    """The sampler that `AUTHORS_SAMPLER` checks is the one a run uses unless told otherwise: every run config's
    default and the label generator's own. A default switched to the rounded sampler fails here."""
    import inspect

    from course_lib.methods.ssa import SAMPLERS, ssa_epoch_features
    from course_lib.training.config import FinetuneConfig, MultitaskConfig

    configs = [FinetuneConfig.from_dict({"method": m}) for m in ("ssa-co", "ssa-hybrid", "bert-mask")]
    defaults = [cfg.options.ssa_sampler for cfg in configs] + [MultitaskConfig(ssa="all").options.ssa_sampler]
    defaults.append(inspect.signature(ssa_epoch_features).parameters["sampler"].default)
    assert {SAMPLERS[name].masks for name in defaults} == {authors_mask_positions}
