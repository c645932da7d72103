"""AG's loss, gradient and α schedule against numbers produced by the authors' own code.

Where the reference numbers come from: github.com/ameet-1997/AttentionGuidance at commit
8e1e6c3855125fe8f1485fbe57d51285edebfade, file attention_guidance/src/transformers/trainer_ag.py, methods
TrainerAG.create_pos_attn_patterns (the identity/next/prev/first patterns), TrainerAG.compute_ag_loss (one
MSELoss per head group, summed over groups and layers) and TrainerAG.linear_schedule_for_scale (α's plateau and
decay). Those three methods were run unchanged, in a scratch folder outside this repository, in float64, on the
inputs rebuilt below (attention_maps()); their results are pasted here as literals. No code of theirs is in
this repository. tests/references/ag_authors.py regenerates AUTHORS and AUTHORS_SCHEDULE:
`.venv/bin/python tests/references/ag_authors.py --authors-checkout /path/to/AttentionGuidance`.

The settings that the docs name as "the authors' code" (docs/methods.md section 4, docs/departures.md section 4)
are ag_reduction="mean", ag_boundary="zero", ag_plateau_steps=20000. Their default data has no padding, so the
mask here is all ones. Their patterns stop at [First]; [Delim] and [Period] are ours and are not checked here.
"""
import pytest
import torch

from course_lib.methods.ag import AttentionGuidance, ag_scale_at

pytestmark = pytest.mark.stored_numbers  # CI runs these under other CPU paths too

LAYERS, BATCH, HEADS, LENGTH = 2, 2, 8, 7
SCALE = 10.0  # α_0, the code's default `scale`
INPUT_IDS = torch.tensor([[0, 11, 12, 4, 13, 14, 2], [0, 21, 4, 22, 23, 4, 2]])  # unread by the four patterns
REL = 1e-9

# (layer, example, head, query, key) of the gradient entries recorded from their run.
PICKS = ((0, 0, 0, 0, 1), (0, 0, 0, 6, 6), (0, 1, 1, 0, 0), (0, 1, 1, 3, 2), (1, 0, 2, 4, 0), (1, 1, 5, 6, 3),
         (1, 0, 6, 2, 2), (1, 1, 7, 5, 5), (0, 1, 3, 1, 0), (1, 0, 4, 0, 0))

# Per head-type string (counts of identity, next, prev, first heads from head 0): their loss before scaling, the
# same per layer, the loss times α_0 (schedule factor 1 at step 0) and the gradient of that scaled loss w.r.t.
# the attention maps of both layers (its norm, its sum and the entries at PICKS).
AUTHORS = {
    "0,1,1,4": {
        "ag_loss": 0.8947438179962006,
        "per_layer": (0.4474070287892528, 0.44733678920694775),
        "scaled_loss": 8.947438179962006,
        "grad_norm": 1.6377060217941561,
        "grad_sum": 1.6326530612244907,
        "grad_picks": (-0.10885483486470919, 0.014122132204278829, 0.0682437273059234, -0.20281715848623746,
                       -0.023366059594418176, 8.245003249112391e-05, 0.0, 0.0, -0.050940130735737735,
                       -0.028752001091892115),
    },
    "2,1,3,2": {
        "ag_loss": 1.1959488274463714,
        "per_layer": (0.5909843955696317, 0.6049644318767399),
        "scaled_loss": 11.959488274463714,
        "grad_norm": 1.6800504949631574,
        "grad_sum": 1.632653061224489,
        "grad_picks": (0.04761339889417601, -0.09497975022439119, -0.0679189526735689, 0.000632237083411871,
                       0.11061739427538851, 0.0001099333766548319, 0.008339056755670359, 0.0003471991619348573,
                       -0.06792017431431699, 0.029691209428497588),
    },
    "1,2,1,3": {
        "ag_loss": 1.1879589379436992,
        "per_layer": (0.6014642312197945, 0.5864947067239048),
        "scaled_loss": 11.879589379436993,
        "grad_norm": 1.8482423091963658,
        "grad_sum": 1.6326530612244896,
        "grad_picks": (0.09522679778835202, -0.18995950044878238, 0.0341218636529617, 0.000632237083411871,
                       0.055308697137694256, 0.0001099333766548319, 0.005559371170446906, 0.0,
                       -0.20376052294295094, -0.03833600145585615),
    },
}

# linear_schedule_for_scale() with t_total = 50000 (their plateau is fixed at 20000 steps).
AUTHORS_SCHEDULE = {0: 1.0, 19999: 1.0, 20000: 1.0, 20001: 0.9999666666666667, 35000: 0.5,
                    49999: 3.3333333333333335e-05, 50000: 0.0, 60000: 0.0}


def attention_maps() -> list[torch.Tensor]:
    """Float64 maps, rows softmax-normalised, from fixed logits 3·sin(1.7·k + 0.3) (k = flat index over
    layer, example, head, query, key): arithmetic rather than a random generator, so they do not depend on
    the torch version or the CPU; another CPU's sin and exp differ only in the last bit, far inside REL."""
    k = torch.arange(LAYERS * BATCH * HEADS * LENGTH * LENGTH, dtype=torch.float64)
    logits = (3.0 * torch.sin(1.7 * k + 0.3)).reshape(LAYERS, BATCH, HEADS, LENGTH, LENGTH)
    return [torch.softmax(logits[layer], dim=-1).requires_grad_(True) for layer in range(LAYERS)]


def code_settings(head_types: str, boundary: str = "zero") -> AttentionGuidance:
    return AttentionGuidance(HEADS, head_types, ag_reduction="mean", ag_boundary=boundary)


def no_padding() -> torch.Tensor:
    return torch.ones(BATCH, LENGTH, dtype=torch.long)


@pytest.mark.parametrize("head_types", sorted(AUTHORS))
def test_loss_matches_authors_code(head_types):
    ref = AUTHORS[head_types]
    guidance = code_settings(head_types)
    maps = [m.detach() for m in attention_maps()]
    loss = guidance.loss(maps, INPUT_IDS, no_padding())
    assert loss.dtype == torch.float64
    assert loss.item() == pytest.approx(ref["ag_loss"], rel=REL)
    per_layer = [guidance.loss((m,), INPUT_IDS, no_padding()).item() for m in maps]
    assert per_layer == pytest.approx(ref["per_layer"], rel=REL)
    alpha = ag_scale_at(0, 100_000, SCALE, ag_plateau_steps=20_000)
    assert (alpha * loss).item() == pytest.approx(ref["scaled_loss"], rel=REL)


@pytest.mark.parametrize("head_types", sorted(AUTHORS))
def test_gradient_matches_authors_code(head_types):
    ref = AUTHORS[head_types]
    maps = attention_maps()
    alpha = ag_scale_at(0, 100_000, SCALE, ag_plateau_steps=20_000)
    (alpha * code_settings(head_types).loss(maps, INPUT_IDS, no_padding())).backward()
    grad = torch.stack([m.grad for m in maps])  # (layers, B, H, L, L)
    assert grad.norm().item() == pytest.approx(ref["grad_norm"], rel=REL)
    assert grad.sum().item() == pytest.approx(ref["grad_sum"], rel=REL)
    assert [grad[p].item() for p in PICKS] == pytest.approx(ref["grad_picks"], rel=REL, abs=1e-15)
    guided = sum(int(c) for c in head_types.split(","))
    assert torch.all(grad[:, :, guided:] == 0)  # heads past the guided ones get nothing, as in their slicing


@pytest.mark.parametrize("boundary, expected", [("zero", 80 / 49), ("uniform", 0.0)])
def test_grad_sum_reflects_boundary_rows(boundary, expected):
    """Each softmax row sums to 1; a target row does too, except the all-zero last row of [Next] and first row of
    [Prev] under the code's boundary. So the gradient sums to 2·α_0·(one row per example and head)/(B·h·L²) per
    group and layer: 2 layers × 2 groups × 20/49 = 80/49, the sum of their gradients for every head-type string
    above; with uniform boundary rows it is 0 (to float32 rounding: ag_targets builds 1/n in float32)."""
    for head_types, ref in AUTHORS.items():
        assert ref["grad_sum"] == pytest.approx(80 / 49, rel=REL)
        maps = attention_maps()
        (SCALE * code_settings(head_types, boundary).loss(maps, INPUT_IDS, no_padding())).backward()
        total = sum(m.grad.sum() for m in maps).item()
        assert total == pytest.approx(expected, rel=REL, abs=1e-6)


def test_paper_settings_do_not_match_authors_code():
    """A control: the defaults (uniform boundary rows) differ from their numbers, so the match above depends on
    ag_boundary="zero" and is not an accident of the inputs."""
    maps = [m.detach() for m in attention_maps()]
    paper = code_settings("0,1,1,4", boundary="uniform").loss(maps, INPUT_IDS, no_padding()).item()
    assert abs(paper - AUTHORS["0,1,1,4"]["ag_loss"]) > 1e-3


@pytest.mark.parametrize("step", sorted(AUTHORS_SCHEDULE))
def test_schedule_matches_authors_code(step):
    factor = ag_scale_at(step, 50_000, 1.0, ag_plateau_steps=20_000)
    assert factor == pytest.approx(AUTHORS_SCHEDULE[step], rel=REL, abs=1e-15)


def test_run_shorter_than_plateau_never_decays():
    """Their linear_schedule_for_scale at t_total = 15000, global_step = 14999 gives 1.0."""
    assert ag_scale_at(14_999, 15_000, SCALE, ag_plateau_steps=20_000) == SCALE
