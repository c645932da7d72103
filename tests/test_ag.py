"""AG's patterns, loss and schedule against their defining identities (docs/methods.md, section 4; Deshpande &
Narasimhan 2020), on tiny hand-made tensors."""
import re

import pytest
import torch

from course_lib.methods.ag import AttentionGuidance, HeadGroup, ag_scale_at, ag_targets, assign_heads
from course_lib.model.bert import BertModel
from course_lib.model.config import BertConfig
from course_lib.runtime.errors import UsageError

LENGTHS = (7, 4, 1)  # real tokens per example; padded to L = 9, one example of a single token
L = 9


def padding_mask(lengths=LENGTHS, length=L) -> torch.Tensor:
    return (torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]).long()  # (B, L)


def uniform_maps(mask: torch.Tensor, heads: int, layers: int = 1) -> tuple[torch.Tensor, ...]:
    """H = 1/n on the real keys of every row (what a softmax of equal logits under the padding mask gives)."""
    n = mask.sum(-1).float()
    row = mask[:, None, None, :].float() / n[:, None, None, None]  # (B, 1, 1, L)
    return tuple(row.expand(-1, heads, mask.shape[1], -1).clone() for _ in range(layers))


def real_rows(mask):
    return mask.bool()


# ---------------------------------------------------------------- patterns


@pytest.mark.parametrize("pattern, boundary", [("first", "uniform"), ("identity", "uniform"), ("next", "uniform"),
                                               ("prev", "uniform"), ("first", "zero"), ("identity", "zero")])
def test_real_rows_sum_to_one(pattern, boundary):
    mask = padding_mask()
    target = ag_targets(pattern, mask, ag_boundary=boundary)
    sums = target.sum(-1)  # (B, L)
    torch.testing.assert_close(sums[mask.bool()], torch.ones(sum(LENGTHS)))
    assert (sums[~mask.bool()] == 0).all(), "padding rows must be empty"


@pytest.mark.parametrize("pattern, zero_at", [("next", lambda n: n - 1), ("prev", lambda n: 0)])
def test_code_boundary_leaves_exactly_one_zero_row(pattern, zero_at):
    mask = padding_mask()
    sums = ag_targets(pattern, mask, ag_boundary="zero").sum(-1)
    for b, n in enumerate(LENGTHS):
        expected = torch.ones(n)
        expected[zero_at(n)] = 0.0
        torch.testing.assert_close(sums[b, :n], expected)


def test_patterns_never_point_into_padding():
    mask = padding_mask()
    ids = torch.randint(1000, 2000, mask.shape)
    ids[:, 0], ids[0, 3] = 101, 1012
    for pattern in ("identity", "next", "prev", "first", "delim", "period"):
        for boundary in ("uniform", "zero"):
            target = ag_targets(pattern, mask, ids, (101, 102) if pattern == "delim" else (1012,), boundary)
            pad = ~mask.bool()
            assert (target[pad] == 0).all() and (target.transpose(1, 2)[pad] == 0).all(), pattern


def test_next_is_prev_transposed_except_the_boundary_rows():
    mask = padding_mask()
    code_next, code_prev = (ag_targets(p, mask, ag_boundary="zero") for p in ("next", "prev"))
    torch.testing.assert_close(code_next, code_prev.transpose(1, 2))
    paper_next, paper_prev = (ag_targets(p, mask, ag_boundary="uniform") for p in ("next", "prev"))
    for b, n in enumerate(LENGTHS):
        rows = torch.ones(L, dtype=torch.bool)
        rows[n - 1] = False  # next's boundary row; prev's (row 0) is excluded from the transpose below
        torch.testing.assert_close(paper_next[b, rows], code_next[b, rows])
        torch.testing.assert_close(paper_prev[b, 1:], code_prev[b, 1:])
        if n > 1:
            torch.testing.assert_close(paper_next[b, n - 1, :n], torch.full((n,), 1 / n))


def test_next_is_the_diagonal_shifted_by_one_and_row_zero_is_first_shifted():
    mask = padding_mask((6,), 6)
    nxt, first, ident = (ag_targets(p, mask, ag_boundary="zero")[0] for p in ("next", "first", "identity"))
    shifted = torch.zeros(6, 6)
    shifted[:, 1:] = ident[:, :-1]  # every query's one-hot moved one key to the right
    torch.testing.assert_close(nxt, shifted)
    torch.testing.assert_close(nxt[0], torch.roll(first[0], 1))


def test_patterns_do_not_depend_on_where_the_padding_is():
    """Left padding gives the same pattern on the real tokens as right padding."""
    right = padding_mask((4,), 6)
    left = right.flip(-1)
    for pattern in ("identity", "next", "prev", "first"):
        a = ag_targets(pattern, right)[0, :4, :4]
        b = ag_targets(pattern, left)[0, 2:, 2:]
        torch.testing.assert_close(a, b)


def test_delim_and_period_are_uniform_over_their_positions(minilm_dir):
    from transformers import BertTokenizerFast

    tok = BertTokenizerFast.from_pretrained(str(minilm_dir))
    batch = tok(["it works. really.", "no period here"], ["second part", "x"], padding=True, return_tensors="pt")
    ids, mask = batch["input_ids"], batch["attention_mask"]
    delim = ag_targets("delim", mask, ids, (tok.cls_token_id, tok.sep_token_id))
    period = ag_targets("period", mask, ids, tok.convert_tokens_to_ids(["."]))
    first = ag_targets("first", mask)
    for b in range(2):
        n = int(mask[b].sum())
        where_delim = torch.isin(ids[b], torch.tensor([tok.cls_token_id, tok.sep_token_id])) & mask[b].bool()
        expected = where_delim.float() / where_delim.sum()
        torch.testing.assert_close(delim[b, :n], expected.expand(n, -1))  # [CLS] and both [SEP]s: 1/3 each
    dots = (ids[0] == tok.convert_tokens_to_ids(".")).float()
    assert dots.sum() == 2
    torch.testing.assert_close(period[0, :int(mask[0].sum())], (dots / 2).expand(int(mask[0].sum()), -1))
    torch.testing.assert_close(period[1], first[1])  # no '.': fall back to [First]


# ---------------------------------------------------------------- head assignment


def test_code_head_types_map_to_next_prev_and_four_first_heads():
    groups = assign_heads("0,1,1,4", 12)
    mapping = {h: g.pattern for g in groups for h in range(g.start, g.stop)}
    assert mapping == {0: "next", 1: "prev", 2: "first", 3: "first", 4: "first", 5: "first"}
    assert assign_heads("next,prev,first:4", 12) == groups
    assert assign_heads("1,0,0,1,0,1", 4) == (HeadGroup("identity", 0, 1), HeadGroup("first", 1, 2),
                                              HeadGroup("period", 2, 3))


@pytest.mark.parametrize("spec, message", [
    ("0,1,1,4", "guides 6 heads but the model has 4"),
    ("0,0,0,0", "guides no head"),
    ("next,sideways", "unknown AG pattern 'sideways' (valid: delim, first, identity, next, period, prev)"),
    ("next:two", "must be a whole number"),
    ("1,1,1,1,1,1,1", "at most 6"),
])
def test_bad_head_types_are_usage_errors(spec, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        assign_heads(spec, 4)


# ---------------------------------------------------------------- loss


@pytest.mark.parametrize("n", [1, 5, 9])
def test_uniform_attention_against_one_hot_rows(n):
    """Per row ||H - P||² = 1 - 1/n: the Frobenius total is n - 1 per head, the mean (n - 1)/n²."""
    mask = padding_mask((n,), 9)
    maps = uniform_maps(mask, heads=4, layers=2)
    frob = AttentionGuidance(4, "0,0,0,3", "frobenius").loss(maps, None, mask)
    mean = AttentionGuidance(4, "0,0,0,3", "mean").loss(maps, None, mask)
    torch.testing.assert_close(frob, torch.tensor(2 * 3 * (n - 1.0)))  # 2 layers x 3 heads
    torch.testing.assert_close(mean, torch.tensor(2 * (n - 1.0) / n ** 2))  # a mean over each group's heads


@pytest.mark.parametrize("n", [2, 6])
def test_boundary_row_contributes_one_over_n_in_code_form_and_zero_in_paper_form(n):
    mask = padding_mask((n,), n)
    maps = uniform_maps(mask, heads=1)
    one_hot_rows = (n - 1) * (1 - 1 / n)
    for boundary, boundary_row in (("zero", 1 / n), ("uniform", 0.0)):
        guidance = AttentionGuidance(1, "next", "frobenius", boundary)
        torch.testing.assert_close(guidance.loss(maps, None, mask), torch.tensor(one_hot_rows + boundary_row))
        mean = AttentionGuidance(1, "next", "mean", boundary).loss(maps, None, mask)
        torch.testing.assert_close(mean, torch.tensor((one_hot_rows + boundary_row) / n ** 2))


def test_padding_is_excluded_from_both_reductions():
    """A padded batch scores like its examples alone: mean over real entries, Frobenius averaged per example."""
    torch.manual_seed(0)
    mask = padding_mask((7, 4), L)
    logits = torch.randn(2, 4, L, L)
    logits = logits + (1 - mask[:, None, None, :]) * -1e4
    probs = torch.softmax(logits, -1)
    probs_garbage = probs.clone()
    probs_garbage[1, :, 4:] = 5.0  # rows of padding queries hold anything; they must not count
    for reduction in ("mean", "frobenius"):
        guidance = AttentionGuidance(4, "1,1,1,1", reduction)
        padded = guidance.loss((probs,), None, mask)
        torch.testing.assert_close(guidance.loss((probs_garbage,), None, mask), padded)
        alone = [guidance.loss((probs[b:b + 1, :, :n, :n],), None, mask[b:b + 1, :n]) for b, n in enumerate((7, 4))]
        if reduction == "frobenius":
            expected = (alone[0] + alone[1]) / 2
        else:  # each group's mean weights the examples by their n² real entries
            expected = (alone[0] * 49 + alone[1] * 16) / 65
        torch.testing.assert_close(padded, expected)


def test_only_the_guided_heads_enter_the_loss():
    mask = padding_mask()
    maps = uniform_maps(mask, heads=6)
    changed = (maps[0].clone(),)
    changed[0][:, 2:] = torch.rand_like(changed[0][:, 2:])
    guidance = AttentionGuidance(6, "0,1,1")
    torch.testing.assert_close(guidance.loss(changed, None, mask), guidance.loss(maps, None, mask))


def test_a_softmax_never_reaches_zero_loss():
    """Softmax rows are strictly positive, so even logits that strongly favour the target leave L_AG > 0."""
    mask = padding_mask((6,), 6)
    target = ag_targets("next", mask, ag_boundary="zero")
    for logits in (torch.randn(1, 1, 6, 6), 20.0 * target[:, None]):
        probs = torch.softmax(logits, -1)
        assert (probs > 0).all()
        for reduction in ("mean", "frobenius"):
            assert AttentionGuidance(1, "next", reduction, "zero").loss((probs,), None, mask) > 0


@pytest.fixture
def one_thread():
    """A tiny model gains nothing from a second thread, and OpenMP threads that spin-wait on busy shared
    cores make it up to 20x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_guidance_trains_the_heads_towards_the_patterns(one_thread):
    """Gradients of L_AG reach the attention parameters: a few Adam steps on L_AG alone reduce it."""
    torch.manual_seed(0)
    model = BertModel(BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                 intermediate_size=64, max_position_embeddings=16, hidden_dropout_prob=0.0,
                                 attention_probs_dropout_prob=0.0))
    ids, mask = torch.randint(1, 50, (4, 12)), padding_mask((12, 9, 12, 5), 12)
    guidance = AttentionGuidance(4, "0,1,1,1")
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        loss = guidance.loss(model(ids, mask, output_attentions=True).attentions, ids, mask)
        losses.append(loss.item())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert losses[-1] < 0.5 * losses[0]


def test_unknown_reduction_and_boundary_are_usage_errors():
    with pytest.raises(UsageError, match=re.escape("unknown ag_reduction 'sum' (valid: frobenius, mean)")):
        AttentionGuidance(4, "0,1,1", "sum")
    with pytest.raises(UsageError, match=re.escape("unknown ag_boundary 'wrap' (valid: uniform, zero)")):
        AttentionGuidance(4, "0,1,1", "mean", "wrap")
    with pytest.raises(UsageError, match="period pattern needs the ids"):
        AttentionGuidance(4, "period")


# ---------------------------------------------------------------- schedule


@pytest.mark.parametrize("plateau", [0, 30, 99])
def test_scale_schedule_endpoints_and_monotone(plateau):
    T, alpha0 = 100, 10.0
    values = [ag_scale_at(t, T, alpha0, plateau) for t in range(T + 1)]
    assert values[0] == alpha0 and values[T] == 0.0
    assert all(a >= b for a, b in zip(values, values[1:]))
    assert all(v == alpha0 for v in values[:plateau + 1])
    decay = values[plateau:]  # piecewise linear: constant steps after the plateau
    steps = [a - b for a, b in zip(decay, decay[1:])]
    assert max(steps) - min(steps) < 1e-9


def test_schedule_never_decays_when_the_run_is_shorter_than_the_plateau():
    """The code's schedule with its 20000-step plateau: runs of T <= 20000 keep alpha_0 throughout."""
    assert [ag_scale_at(t, 50, 10.0, 20000) for t in (0, 25, 49)] == [10.0, 10.0, 10.0]
