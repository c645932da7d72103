"""Our from-scratch BERT against Hugging Face's, on the real pretrained MiniLM weights."""

import pytest
import torch
import transformers

from course_lib.model.bert import BertModel
from course_lib.model.config import BertConfig
from course_lib.model.heads import SequenceClassifier
from course_lib.model.weights import hf_to_ours, load_pretrained, ours_to_hf
from course_lib.runtime.errors import UsageError
from course_lib.training.loop import param_groups

ATOL = 1e-5


@pytest.fixture(scope="module")
def ours():
    model, tokenizer = load_pretrained()
    return model.eval(), tokenizer


@pytest.fixture(scope="module")
def batch(ours, sentences):
    _, tokenizer = ours
    pairs = [(s, sentences[(i + 1) % len(sentences)]) for i, s in enumerate(sentences)]
    return tokenizer([a for a, _ in pairs], [b for _, b in pairs], padding=True, return_tensors="pt")


def hf_model(minilm_dir, impl):
    return transformers.BertModel.from_pretrained(str(minilm_dir), attn_implementation=impl).eval()


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_outputs_match_hugging_face_on_real_weights(ours, batch, minilm_dir, impl):
    model, _ = ours
    ref = hf_model(minilm_dir, impl)
    assert batch["attention_mask"].float().mean() < 0.9, "the batch should contain padding"
    with torch.no_grad():
        got = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        want = ref(**batch)
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(got.last_hidden_state[real], want.last_hidden_state[real], atol=ATOL, rtol=0)
    torch.testing.assert_close(got.pooler_output, want.pooler_output, atol=ATOL, rtol=0)


def test_every_attention_map_matches(ours, batch, minilm_dir):
    model, _ = ours
    ref = hf_model(minilm_dir, "eager")
    with torch.no_grad():
        got = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], output_attentions=True)
        want = ref(**batch, output_attentions=True)
    assert len(got.attentions) == ref.config.num_hidden_layers
    for mine, theirs in zip(got.attentions, want.attentions):
        assert mine.shape == (4, 12, batch["input_ids"].shape[1], batch["input_ids"].shape[1])
        torch.testing.assert_close(mine, theirs, atol=ATOL, rtol=0)
        torch.testing.assert_close(mine.sum(-1), torch.ones_like(mine.sum(-1)))


def test_fast_path_equals_explicit_attention(ours, batch):
    model, _ = ours
    with torch.no_grad():
        fast = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        slow = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], output_attentions=True)
    torch.testing.assert_close(fast.last_hidden_state, slow.last_hidden_state, atol=ATOL, rtol=0)


def test_cls_row_last_layer_gives_hugging_faces_pooled_output_and_the_same_gradients(ours, batch, minilm_dir):
    """The classification heads' shortcut (cls_only): the last layer computes [CLS] alone, with a bias per query
    row."""
    model, _ = ours
    ids, mask, types = batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]
    with torch.no_grad():
        short = model(ids, mask, types, cls_only=True)
        want = hf_model(minilm_dir, "sdpa")(**batch).pooler_output
    assert short.last_hidden_state.shape == (4, 1, model.config.hidden_size)
    torch.testing.assert_close(short.pooler_output, want, atol=ATOL, rtol=0)
    L = ids.shape[1]
    bias = torch.randn(4, 1, L, L) * (torch.rand(4, 1, L, L) < 0.3) * -1e4  # ASA-like cuts, different per row
    grads = []
    for cls_only in (False, True):
        model.zero_grad(set_to_none=True)
        model(ids, mask, types, attention_bias=bias, cls_only=cls_only).pooler_output.square().sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    model.zero_grad(set_to_none=True)
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], atol=1e-5, rtol=1e-4)


def test_attention_bias_of_minus_infinity_is_a_mask(ours, batch):
    """Masking keys through the attention bias gives exactly what the padding mask gives."""
    model, _ = ours
    ids, mask = batch["input_ids"], batch["attention_mask"]
    as_bias = torch.where(mask.bool(), 0.0, torch.finfo(torch.float32).min)[:, None, None, :]
    with torch.no_grad():
        by_mask = model(ids, mask, batch["token_type_ids"]).last_hidden_state
        by_bias = model(ids, None, batch["token_type_ids"], attention_bias=as_bias).last_hidden_state
    real = mask.bool()
    torch.testing.assert_close(by_bias[real], by_mask[real], atol=ATOL, rtol=0)


def test_one_adamw_step_updates_weights_like_hugging_face(minilm_dir, batch):
    """Same loss, gradients, clipping and AdamW step (decay off for biases and LayerNorm) as HF."""
    no_dropout = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    ref = transformers.BertForSequenceClassification.from_pretrained(str(minilm_dir), num_labels=2, **no_dropout)
    encoder, _ = load_pretrained(**no_dropout)
    model = SequenceClassifier(encoder, num_labels=2, dropout=0.0)
    model.classifier.load_state_dict(ref.classifier.state_dict())
    labels = torch.tensor([1, 0, 0, 1])
    hf_groups = [
        {"params": [p for n, p in ref.named_parameters() if not ("bias" in n or "LayerNorm" in n)], "weight_decay": 0.01},
        {"params": [p for n, p in ref.named_parameters() if "bias" in n or "LayerNorm" in n], "weight_decay": 0.0},
    ]
    # Adam's first step is lr * g / (|g| + eps): with the default eps of 1e-8 a gradient of 1e-9 already moves its
    # weight by lr / 10, so rounding differences in near-zero gradients (another summation order: oneDNN's matmul,
    # the [CLS]-only last layer) would flip whole steps. eps 1e-6 keeps every real step and damps those.
    ours_opt = torch.optim.AdamW(param_groups(model, 0.01), lr=1e-3, eps=1e-6)
    hf_opt = torch.optim.AdamW(hf_groups, lr=1e-3, eps=1e-6)
    assert [len(g["params"]) for g in hf_groups][1] == sum(p.ndim == 1 for p in ref.parameters())

    before = model.encoder.pooler.weight.detach().clone()
    model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], labels=labels).loss.backward()
    ref(**batch, labels=labels).loss.backward()
    for params, opt in ((model.parameters(), ours_opt), (ref.parameters(), hf_opt)):
        torch.nn.utils.clip_grad_norm_(list(params), 1.0)
        opt.step()

    mine = ours_to_hf(model.encoder.state_dict(), 6)
    theirs = {k.removeprefix("bert."): v for k, v in ref.state_dict().items()}
    assert (model.encoder.pooler.weight - before).abs().max() > 1e-4  # the step really moved the weights
    assert set(mine) == {k for k in theirs if not k.startswith("classifier.")}
    for name, value in mine.items():
        torch.testing.assert_close(value, theirs[name], atol=ATOL, rtol=0, msg=name)
    torch.testing.assert_close(model.classifier.weight, ref.classifier.weight, atol=ATOL, rtol=0)


def test_bert_base_shaped_random_model_matches():
    """A random bert-base-uncased-shaped model: same parameter count and outputs."""
    ref = transformers.BertModel(transformers.BertConfig(), add_pooling_layer=True).eval()
    ours = BertModel(BertConfig()).eval()
    ours.load_state_dict(hf_to_ours(ref.state_dict(), 12), strict=True)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in ref.parameters()) == 109_482_240
    ids = torch.randint(1000, 30000, (2, 24))
    mask = torch.ones_like(ids)
    mask[1, 15:] = 0
    with torch.no_grad():
        got, want = ours(ids, mask), ref(input_ids=ids, attention_mask=mask)
    real = mask.bool()
    torch.testing.assert_close(got.last_hidden_state[real], want.last_hidden_state[real], atol=ATOL, rtol=0)
    torch.testing.assert_close(got.pooler_output, want.pooler_output, atol=ATOL, rtol=0)


def test_loading_is_strict(minilm_dir, tmp_path):
    from safetensors.torch import load_file, save_file

    for name in ("config.json", "vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (tmp_path / name).write_bytes((minilm_dir / name).read_bytes())
    state = load_file(str(minilm_dir / "model.safetensors"))
    del state["encoder.layer.3.attention.self.key.bias"]
    save_file(state, str(tmp_path / "model.safetensors"))
    with pytest.raises(UsageError, match="missing.*layer.3.attention.self.key.bias"):
        load_pretrained(tmp_path)
    with pytest.raises(UsageError, match="no config.json"):
        load_pretrained(tmp_path.parent)
    with pytest.raises(UsageError, match="neither a local folder nor reachable"):
        load_pretrained("no-such-user/no-such-bert-model")


def test_overrides_are_validated():
    model, _ = load_pretrained(hidden_dropout_prob=0.0)
    assert model.config.hidden_dropout_prob == 0.0
    with pytest.raises(UsageError, match="unknown BertConfig option 'hidden_dropout'"):
        load_pretrained(hidden_dropout=0.0)
    with pytest.raises(UsageError, match="attention normaliser 'sparsest'"):
        model.config.replace(attn_normalizer="sparsest")


def test_input_longer_than_the_position_table_is_a_clear_error():
    cfg = BertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16,
                     max_position_embeddings=8)
    model = BertModel(cfg).eval()
    assert model(torch.ones(2, 8, dtype=torch.long)).last_hidden_state.shape == (2, 8, 8)
    with pytest.raises(ValueError, match=r"input of 9 tokens is longer than the model's max_position_embeddings 8"):
        model(torch.ones(2, 9, dtype=torch.long))
