"""SSA (Kou et al. 2020) against numbers computed by the authors' own code.

Where the numbers come from: the authors' repository koukoulala/ssa_BERT at commit 93284bb (2020-05-27), its
modeling.py classes `BertForNSP_co` (SSA-Co) and `BertForNSPAug` (SSA-Hybrid), run in a scratch folder outside
this repository, in float64, with dropout 0. Their model received the weights of the models this file builds
(seeded below), copied tensor by tensor: encoder through `ours_to_hf` (Q, K, V split from our fused qkv), token
head dense/LayerNorm and output layer(s), classifier. The batch went through their forward as their training step
calls it (run_ssa.py: labels=None and token_real_label given; the task loss, cross-entropy or MSE, computed
outside and combined as (1 - w)·task + w·token with w = 0.3, i.e. our ssa_target_weight = 0.7), then backward.
Their code is not part of this repository; only its outputs are stored here. tests/references/ssa_authors.py
regenerates AUTHORS: `.venv/bin/python tests/references/ssa_authors.py --authors-checkout /path/to/ssa_BERT`.

What is covered: SSA-Co and SSA-Hybrid, with the shared token head and with one output layer per position
(`ssa_share_weight=False`, their `--share_weight 0`), classification and regression: task logits, token logits,
the two losses and their sum, and selected gradients (norms of the word embeddings, of layer 0's Q/K/V, of the
token head's dense and output weights and of the classifier; a few single entries).

Two precisions. SSAClassifier.forward computes the token scores and the losses in float32 (`.float()`), so in
a float64 model its outputs carry float32 rounding (about 1e-7 relative); those are compared at rel 1e-6. The
same modules composed in float64 (encoder, token_head, pool, classifier, target_weight) match the authors' code
to about 1e-15; they are compared at rel 1e-9. β = 0.5 and 0.75 are used because `pool` builds β as a float32
tensor (0.9 would be 0.8999999762).

A hybrid row in which no token passes the threshold is a documented departure (docs/departures.md, section 1):
`test_hybrid_row_with_no_kept_token_is_the_documented_departure` pins both rules.
"""
import pytest
import torch
import torch.nn.functional as F

from course_lib.methods.ssa import IGNORE, SSAClassifier
from course_lib.model.bert import BertModel
from course_lib.model.config import BertConfig

CLS, SEP, PAD = 101, 102, 0
MAX_LEN = 32
# name: (seed, num_labels, hybrid, shared token head, beta = ssa_cls_weight, threshold)
CASES = {
    "co_shared": (0, 2, False, True, 0.5, 0.3),
    "hybrid_shared": (1, 2, True, True, 0.5, 0.3),
    "co_per_position": (2, 2, False, False, 0.5, 0.3),
    "hybrid_per_position_regression": (3, 1, True, False, 0.75, 0.3),
}

AUTHORS = {
    "co_shared": {
        "logits": [
            -0.006094617505314023, 0.007482239279628143, -0.006209507224472042, 0.007233867271609145,
            -0.005978034548674549, 0.007325755636896971
        ],
        "token_logits_row0": [
            -0.02452460233498771, 0.11285659760166612, 0.04382259358046016, -0.06094504724863385, 0.011737693468648988,
            -0.04824512774575263, 0.36243502279762374, 0.10224338771115488, -0.0836518498198946, 0.011535849648284392,
            0.04274430382481841, 0.11063616103465412, -0.1372419336791072, -0.13124662428682735, -0.06753660058208792,
            -0.13264364935926765, 0.3387812404046268, 0.10183452245968078, 0.2117915376989212, 0.11575466965804643
        ],
        "token_logits_norm": 1.0771823690036373,
        "loss": 0.6881075977672291,
        "task_loss": 0.6909302202354347,
        "ssa_loss": 0.6815214786747492,
        "grad_norms": [
            0.20621722891183306, 0.0034230575483687013, 0.35496097124192194, 0.3298531543195671, 0.09992951852188334
        ],
        "grad_word_emb_12": [0.0037597688683113305, -0.00594022804565107, 0.004384925526685482, -0.004209957036332224],
        "grad_classifier_0": [0.014990057993421825, 0.0036347592089666283, 0.01080333066111198, 0.009822480049088247],
    },
    "hybrid_shared": {
        "logits": [
            0.027034940842734622, 0.02296239411211275, 0.0356164699321101, -0.001966890382533523, 0.054748633651690026,
            0.033553952320461225
        ],
        "token_logits_row0": [
            0.10892482718335159, -0.08812409199485474, 0.02359077139155069, -0.19221565525770612, 0.1122772694189705,
            -0.14870144254760614, 0.13925200877654836, -0.1425745930959234, -0.04492732833950372, -0.10544594375827127,
            0.10471590073930064, -0.1070449235430097, -0.034209291267993505, -0.14590068901696493, 0.07846647816709243,
            -0.032899530469644875, 0.09046794014587824, -0.14755561015264912, 0.05718763940841359, 0.015062298572734396
        ],
        "token_logits_norm": 0.777496100508521,
        "loss": 0.7006774192926318,
        "task_loss": 0.6911727509170684,
        "ssa_loss": 0.7228549788356132,
        "grad_norms": [
            0.24911981022804558, 0.007944408602796018, 0.3500769683290269, 0.3718020314457489, 0.5724798586153914
        ],
        "grad_word_emb_12": [-0.00517156715013457, 0.006174869392350822, -0.005684294106956748, 0.0027421537649885237],
        "grad_classifier_0": [-0.07220343503005658, -0.08211419715526064, 0.05990829845344897, 0.04808942124019252],
    },
    "co_per_position": {
        "logits": [
            0.01315635062641129, 0.02050533832109934, 0.01327014138422588, 0.02046061940618346, 0.013141688622110292,
            0.02060914956513274
        ],
        "token_logits_row0": [
            -0.026393763136638215, -0.06821614266311249, -0.14792470416969516, 0.0961649267419133, -0.12350386722226743,
            -0.056474331616963434, 0.025697418006527376, 0.09889987110592527, -0.04445270374965932,
            -0.08580493128896567, -0.034770216455918865, 0.043923374070553606, 0.031866032636614264,
            0.07980047479691356, -0.12065683247518237, 0.189858752156302, -0.0020635949993370317, -0.10050144759307797,
            -0.15674022830140266, -0.03702432306115895
        ],
        "token_logits_norm": 0.8199124567779859,
        "loss": 0.6880869916499319,
        "task_loss": 0.6918829135075187,
        "ssa_loss": 0.6792298406488962,
        "grad_norms": [
            0.17530899236490574, 0.0028842635998059126, 0.32884600286342697, 0.30596258284750216, 0.07631259746726898
        ],
        "grad_word_emb_12": [-0.004118729127290632, 0.006103863608200507, 0.0035008800830065062, 0.0006910540524609662],
        "grad_classifier_0": [
            -0.0012415473778137319, 0.0005159415492341801, 0.002665706109974512, 0.015099340250406986
        ],
    },
    "hybrid_per_position_regression": {
        "logits": [0.004664082905919425, 0.017832482503237452, 0.02993927947429563],
        "token_logits_row0": [
            0.14917928448333473, -0.000347712510668563, 0.09832155621130396, -0.08240611917297856, 0.10576230812453755,
            -0.02749092908681338, -0.12268293494917679, 0.2148908696552007, 0.03970906203533379, 0.09920748331994603,
            -0.16453460751965712, -0.020264802047292467, 0.17610596019519087, 0.11186200644651718, 0.0313374057987074,
            0.08466214058345464, 0.10413218336598815, -0.1487073819959221, -0.15375882967013768, -0.02636901232672627
        ],
        "token_logits_norm": 0.8821852572054363,
        "loss": 7.4167991457287075,
        "task_loss": 10.289567877601712,
        "ssa_loss": 0.713672104691699,
        "grad_norms": [
            1.8276751159849582, 0.046052842698377776, 0.3183945521957308, 0.3309919751975602, 3.4158792176771295
        ],
        "grad_word_emb_12": [
            -0.001807152480096825, -0.006243432852253277, -0.009947658084807886, -0.0020981900153010653
        ],
        "grad_classifier_0": [0.1641141086342851, -1.2103708580647212, -0.0023328111338469792, 0.7924620384625192],
    },
    "no_kept_row": {
        "logits": [
            0.026704649866057976, 0.006166393136769845, 0.03367151291079413, -0.020368674811165055, 0.03147139860222993,
            0.013131903461323516
        ],
        "loss": 0.7003978480302315,
    },
}


def build(seed, num_labels, hybrid, shared, beta, threshold) -> SSAClassifier:
    """The model whose weights were copied into the authors' (float32 draws from the seed, then float64)."""
    torch.manual_seed(seed)
    encoder = BertModel(BertConfig(vocab_size=200, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                   intermediate_size=64, max_position_embeddings=MAX_LEN,
                                   hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    model = SSAClassifier(encoder, num_labels, 0.0, [CLS, SEP, PAD], max_len=MAX_LEN, hybrid=hybrid,
                          ssa_target_weight=0.7, ssa_cls_weight=beta, ssa_threshold=threshold,
                          ssa_share_weight=shared)
    return model.double().train()


def inputs(num_labels):
    """Three sequences padded to 10, the second a pair. Token labels as the authors' data_util.py makes them:
    -1 exactly on [CLS], [SEP] and padding, 0 on masked-out tokens, 1 on the other real tokens."""
    ids = torch.tensor([[CLS, 11, 12, 13, 14, 15, 16, 17, 18, SEP],
                        [CLS, 21, 22, 23, SEP, 24, 25, SEP, PAD, PAD],
                        [CLS, 31, 32, 33, SEP, PAD, PAD, PAD, PAD, PAD]])
    types = torch.zeros_like(ids)
    types[1, 5:8] = 1
    token_labels = torch.tensor([[-1, 1, 0, 0, 1, 1, 1, 0, 1, -1],
                                 [-1, 1, 1, 0, -1, 1, 0, -1, -1, -1],
                                 [-1, 1, 0, 1, -1, -1, -1, -1, -1, -1]])
    labels = torch.tensor([0.7, 3.1, 4.6], dtype=torch.float64) if num_labels == 1 else torch.tensor([1, 0, 1])
    return ids, (ids != PAD).long(), types, token_labels, labels


def float64_pass(model, ids, mask, types, token_labels, labels):
    """The model's own modules composed without forward's float32 casts: (logits, token logits, task loss,
    token loss, total loss), all float64."""
    out = model.encoder(ids, mask, types)
    token_logits = model.token_head(out.last_hidden_state)
    if model.hybrid:
        scores = token_logits.softmax(-1)[..., 1]
        logits = model.classifier(model.pool(out.last_hidden_state, out.pooler_output, scores, ids, mask))
    else:
        logits = model.classifier(model.dropout(out.pooler_output))
    if model.num_labels == 1:
        task = F.mse_loss(logits.squeeze(-1), labels)
    else:
        task = F.cross_entropy(logits, labels)
    token = F.cross_entropy(token_logits.flatten(0, 1), token_labels.flatten(), ignore_index=IGNORE)
    return logits, token_logits, task, token, model.target_weight * task + (1 - model.target_weight) * token


def gradients(model) -> dict:
    """The gradients stored from the authors' run, in their order."""
    g = {name: p.grad for name, p in model.named_parameters()}
    norms = [g[n].norm().item() for n in ("encoder.embeddings.word.weight", "encoder.layers.0.attention.qkv.weight",
                                          "token_head.dense.weight", "token_head.weight", "classifier.weight")]
    return {"grad_norms": norms, "grad_word_emb_12": g["encoder.embeddings.word.weight"][12, :4].tolist(),
            "grad_classifier_0": g["classifier.weight"][0, :4].tolist()}


def check(got: dict, rel: float, abs_: float, keys) -> None:
    for key in keys:
        want = AUTHORS[got["case"]][key]
        assert got[key] == pytest.approx(want, rel=rel, abs=abs_), key


@pytest.mark.parametrize("case", CASES)
def test_float64_modules_match_the_authors_code(case):
    model = build(*CASES[case])
    ids, mask, types, token_labels, labels = inputs(model.num_labels)
    logits, token_logits, task, token, loss = float64_pass(model, ids, mask, types, token_labels, labels)
    loss.backward()
    got = {"case": case, "logits": logits.flatten().tolist(), "token_logits_row0": token_logits[0].flatten().tolist(),
           "token_logits_norm": token_logits.norm().item(), "task_loss": task.item(), "ssa_loss": token.item(),
           "loss": loss.item(), **gradients(model)}
    check(got, 1e-9, 1e-14, [k for k in AUTHORS[case]])


@pytest.mark.parametrize("case", CASES)
def test_forward_matches_the_authors_code_up_to_its_float32_casts(case):
    model = build(*CASES[case])
    ids, mask, types, token_labels, labels = inputs(model.num_labels)
    out = model(ids, mask, types, labels=labels, token_labels=token_labels)
    out.loss.backward()
    got = {"case": case, "logits": out.logits.flatten().tolist(),
           "token_logits_row0": out.token_logits[0].flatten().tolist(),
           "token_logits_norm": out.token_logits.norm().item(), "loss": out.loss.item(),
           "ssa_loss": out.stats["ssa_loss"][0].item(), **gradients(model)}
    check(got, 1e-9, 1e-14, ["token_logits_row0", "token_logits_norm"])  # no cast before the token logits
    if not model.hybrid:
        check(got, 1e-9, 1e-14, ["logits"])
    check(got, 1e-6, 1e-8, ["logits", "loss", "ssa_loss", "grad_norms", "grad_word_emb_12", "grad_classifier_0"])


def test_hybrid_row_with_no_kept_token_is_the_documented_departure():
    """Threshold 0.999: no token of any row is kept. The authors' pooling then adds -10^4 to every position, so
    its weights are softmax_i(s_i) over every position of the padded row ([CLS], [SEP] and padding included):
    their logits are those of beta·P + (1 - beta)·Σ_i softmax(s)_i H_i. Ours falls back to beta = 1: P alone."""
    model = build(1, 2, True, True, 0.5, 0.999)
    ids, mask, types, _, _ = inputs(2)
    with torch.no_grad():
        out = model.encoder(ids, mask, types)
        hidden, pooled = out.last_hidden_state, out.pooler_output
        scores = model.token_head(hidden).softmax(-1)[..., 1]
        assert (scores < 0.999).all()
        theirs = model.classifier(0.5 * pooled + 0.5 * torch.einsum("bl,bld->bd", scores.softmax(-1), hidden))
        ours = model(ids, mask, types).logits
    assert theirs.flatten().tolist() == pytest.approx(AUTHORS["no_kept_row"]["logits"], rel=1e-9, abs=1e-14)
    torch.testing.assert_close(ours, model.classifier(pooled), rtol=1e-12, atol=1e-14)
    assert (ours - theirs).abs().max() > 1e-2  # the size of the departure on this batch: 0.043
