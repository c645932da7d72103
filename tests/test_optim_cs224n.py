"""The from-scratch AdamW behind the CS224N minBERT optimizer interface.

(a)/(b): that project's optimizer test (a bias-free Linear(3, 2) fit to y = [x0 + x1, -x2] for 1000 steps, lr 1e-3,
weight_decay 1e-4, the project's other defaults) run with our AdamW, against a plain-numpy float64 version of the
project's own update written here (step size lr · sqrt(1 - beta2^t) / (1 - beta1^t), eps on sqrt(v), decay after
the step). Measured on torch 2.13 (CPU), max |ours - course form| over the final weights:

  - the test in float64: 6.9e-7 with correct_bias=True (6.6e-7 of it from where eps sits, 3.5e-8 from the order
    of decay and step) and 4.9e-8 with correct_bias=False; required < 1e-6. With eps = 0 and weight_decay = 0
    the forms are the same update: 1.1e-16, required < 1e-12.
  - the test as the project runs it, in float32: 1.05e-5 (correct_bias=True) and 1.09e-5 (False). That is float32
    rounding of the weights over 1000 small steps, not the formula: our own float32 and float64 runs differ by
    1.09e-5, and no float32 implementation can match a float64 one to 1e-6 here. The project's tolerance
    (atol 1e-6, rtol 1e-4) absorbs it: the worst element uses 49% of its allowance. Required: that allclose.

(c): step-for-step equality with torch.optim.AdamW (measured: 0.0) when both get the same eps and weight_decay,
for torch's defaults and for the project's. (d): a correct_bias that is not a bool is refused.
"""
import numpy as np
import pytest
import torch

from course_lib.runtime.errors import UsageError
from course_lib.training.optim import AdamW

SEED, STEPS, LR, WEIGHT_DECAY = 0, 1000, 1e-3, 1e-4
COURSE_DEFAULTS = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-6, "weight_decay": 0.0, "correct_bias": True}
TORCH_DEFAULTS = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 1e-2}


def course_test_with_ours(dtype=torch.float32, **overrides) -> tuple[np.ndarray, np.ndarray]:
    """The project's test loop with our AdamW, constructed as that test does (plus `overrides`):
    (initial weight, final weight). float32 is the test as written; float64 takes rounding out of the picture."""
    rng = np.random.default_rng(SEED)
    torch.manual_seed(SEED)
    model = torch.nn.Linear(3, 2, bias=False).to(dtype)
    start = model.weight.detach().clone()
    opt = AdamW(model.parameters(), **{"lr": LR, "weight_decay": WEIGHT_DECAY, "correct_bias": True, **overrides})
    for _ in range(STEPS):
        opt.zero_grad()
        x = torch.tensor(rng.uniform(size=model.in_features), dtype=torch.float32).to(dtype)  # FloatTensor
        y = torch.stack([x[0] + x[1], -x[2]])
        ((y - model(x)) ** 2).sum().backward()
        opt.step()
    return start.double().numpy(), model.weight.detach().double().numpy()


def course_update_in_numpy(w0: np.ndarray, correct_bias: bool = True, eps: float = 1e-6,
                           weight_decay: float = WEIGHT_DECAY, beta1: float = 0.9, beta2: float = 0.999) -> np.ndarray:
    """The project's reference AdamW (bias correction folded into the step size, decay after the step), float64,
    on the same inputs: the same generator, each x rounded to float32 as the test's FloatTensor does."""
    rng = np.random.default_rng(SEED)
    w = w0.astype(np.float64)
    m, v = np.zeros_like(w), np.zeros_like(w)
    for t in range(1, STEPS + 1):
        x = rng.uniform(size=3).astype(np.float32).astype(np.float64)
        y = np.array([x[0] + x[1], -x[2]])
        g = 2.0 * np.outer(w @ x - y, x)  # d/dW of sum((y - W x)²)
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        step_size = LR * np.sqrt(1 - beta2 ** t) / (1 - beta1 ** t) if correct_bias else LR
        w = w - step_size * m / (np.sqrt(v) + eps)
        w = w - LR * weight_decay * w
    return w


@pytest.mark.parametrize("correct_bias", [True, False])
def test_course_optimizer_test_in_float64_matches_the_course_form(correct_bias):
    start, ours = course_test_with_ours(torch.float64, correct_bias=correct_bias)
    ref = course_update_in_numpy(start, correct_bias)
    err = np.abs(ours - ref).max()
    assert err < 1e-6, f"max |ours - course form| = {err:.3g}"
    assert np.abs(ref - start).max() > 0.1  # the weights really moved: the comparison means something


@pytest.mark.parametrize("correct_bias", [True, False])
def test_without_eps_and_decay_the_two_forms_are_the_same_update(correct_bias):
    start, ours = course_test_with_ours(torch.float64, correct_bias=correct_bias, eps=0.0, weight_decay=0.0)
    ref = course_update_in_numpy(start, correct_bias, eps=0.0, weight_decay=0.0)
    assert np.abs(ours - ref).max() < 1e-12


@pytest.mark.parametrize("correct_bias", [True, False])
def test_course_optimizer_test_as_written_passes_its_tolerance(correct_bias):
    """float32, as the project runs it: within the project's allclose(atol=1e-6, rtol=1e-4) of the course form."""
    start, ours = course_test_with_ours(correct_bias=correct_bias)
    ref = course_update_in_numpy(start, correct_bias)
    err = np.abs(ours - ref)
    assert np.all(err <= 1e-6 + 1e-4 * np.abs(ref)), f"max |ours - course form| = {err.max():.3g}"


def test_correct_bias_changes_the_trajectory():
    """Without the correction the first step is sqrt(1 - beta2) / (1 - beta1) ≈ 3.2x larger (m and v start at 0):
    the final weights move apart far beyond the tolerances above (measured: 0.30)."""
    (_, with_correction), (_, without) = (course_test_with_ours(correct_bias=cb) for cb in (True, False))
    assert np.abs(with_correction - without).max() > 1e-3


def run_against_torch(ours_kwargs: dict, torch_kwargs: dict, steps: int = 300) -> tuple[float, float]:
    """A small tanh MLP trained by both optimizers on the same batches: the largest difference in parameters
    over all steps, and the largest parameter change (so a pass is not vacuous)."""
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    twin = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    twin.load_state_dict(model.state_dict())
    start = [p.detach().clone() for p in model.parameters()]
    pairs = ((model, AdamW(model.parameters(), **ours_kwargs)), (twin, torch.optim.AdamW(twin.parameters(),
                                                                                        **torch_kwargs)))
    worst = 0.0
    for _ in range(steps):
        x, y = torch.randn(16, 4), torch.randn(16, 3)
        for m, opt in pairs:
            opt.zero_grad()
            torch.nn.functional.mse_loss(m(x), y).backward()
            opt.step()
        worst = max([worst] + [(a - b).abs().max().item() for a, b in zip(model.parameters(), twin.parameters())])
    moved = max((p - s).abs().max().item() for p, s in zip(model.parameters(), start))
    return worst, moved


@pytest.mark.parametrize("ours_kwargs, torch_kwargs", [
    ({"lr": 1e-2, "eps": 1e-8, "weight_decay": 1e-2}, {"lr": 1e-2}),  # torch's defaults, given to ours
    ({"lr": 1e-2}, {"lr": 1e-2, "eps": 1e-6, "weight_decay": 0.0}),  # the course's defaults, given to torch
], ids=["torch-defaults", "course-defaults"])
def test_equals_torch_adamw_when_given_the_same_settings(ours_kwargs, torch_kwargs):
    worst, moved = run_against_torch(ours_kwargs, torch_kwargs)
    assert worst <= 1e-6, f"max |ours - torch| = {worst:.3g}"
    assert moved > 0.1


def test_defaults_are_the_course_ones():
    defaults = AdamW([torch.zeros(1)]).defaults
    assert defaults == COURSE_DEFAULTS
    theirs = torch.optim.AdamW([torch.zeros(1)]).defaults
    assert {k: theirs[k] for k in TORCH_DEFAULTS} == TORCH_DEFAULTS


def test_correct_bias_per_group_and_old_state_dicts():
    a, b = torch.ones(3, requires_grad=True), torch.ones(3, requires_grad=True)
    opt = AdamW([{"params": [a]}, {"params": [b], "correct_bias": False}], lr=0.1)
    (a.sum() + b.sum()).backward()
    opt.step()
    # step 1 with a gradient of 1: bias-corrected moves by lr; uncorrected by lr · 0.1 / (sqrt(0.001) + eps)
    torch.testing.assert_close(a.detach(), torch.full((3,), 0.9), atol=1e-6, rtol=0)
    torch.testing.assert_close(b.detach(), torch.full((3,), 1 - 0.1 * 0.1 / (0.001 ** 0.5 + 1e-6)), atol=1e-6,
                               rtol=0)
    saved = opt.state_dict()
    for group in saved["param_groups"]:
        del group["correct_bias"]
    opt.load_state_dict(saved)
    assert [g["correct_bias"] for g in opt.param_groups] == [True, True]


@pytest.mark.parametrize("bad", ["yes", 1, None])
def test_a_correct_bias_that_is_not_a_bool_is_refused(bad):
    with pytest.raises(UsageError, match=f"correct_bias must be True or False, got {bad!r}"):
        AdamW([torch.zeros(1, requires_grad=True)], correct_bias=bad)
    with pytest.raises(UsageError, match=f"got {bad!r}"):
        AdamW([{"params": [torch.zeros(1, requires_grad=True)], "correct_bias": bad}])
