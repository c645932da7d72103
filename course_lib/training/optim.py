"""AdamW from scratch: Adam with decoupled weight decay (Loshchilov & Hutter 2019, Algorithm 2).

Adam (Kingma & Ba 2015) keeps running averages of the gradient (m) and of its square (v), corrects their bias
towards 0 in the first steps, and steps by m / (sqrt(v) + eps). L2 regularisation added to the loss would
pass through that rescaling; AdamW instead shrinks the weights directly, outside the adaptive step.

The update is `torch.optim.AdamW`'s (a test checks the two agree step by step): lr, betas = (beta1, beta2),
eps added to sqrt(v_hat), and weight_decay multiplied by the current lr and applied before the adaptive step,
so the decay follows any learning-rate schedule: theta ← theta · (1 - lr · weight_decay). AMSGrad, `maximize`
and complex parameters are not supported. The training loops use `torch.optim.AdamW`, whose multi-tensor
kernels are faster on GPUs; this class is the readable version (question q2a of the assignment).

The constructor is the one of the Stanford CS224N minBERT project's optimizer: `AdamW(params, lr=1e-3,
betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0, correct_bias=True)`, with that project's defaults. torch's
defaults differ (eps 1e-8, weight_decay 1e-2): to reproduce `torch.optim.AdamW(params)`, pass
eps=1e-8, weight_decay=1e-2. `correct_bias=False` skips the bias correction (m and v are used as they
are), which torch has no option for.

That project's reference update (the old Hugging Face one) is written differently: it folds the bias
correction into the step size, lr · sqrt(1 - beta2^t) / (1 - beta1^t), adds eps to sqrt(v) rather than
sqrt(v_hat), and decays the weights after the step instead of before. Rewritten in terms of v_hat, its eps is
eps / sqrt(1 - beta2^t) (at most ~32x ours, in the first steps, and falling to ours), and its decay also
shrinks the step just taken. With eps = 0 and weight_decay = 0 the two are the same update; otherwise each
step differs by O(lr · eps / sqrt(v_hat)) and O(lr² · weight_decay), tiny next to the step itself (~lr), and
within that project's optimizer test's tolerance: tests/test_optim_cs224n.py measures the gap on that test.
"""
from __future__ import annotations

import torch

from course_lib.runtime.errors import UsageError


@torch.no_grad()
def adamw_update(param: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
                 step: int, lr: float, beta1: float, beta2: float, eps: float, weight_decay: float,
                 correct_bias: bool = True) -> None:
    """[q2a] One AdamW step on one parameter tensor, in place (Loshchilov & Hutter 2019, Algorithm 2).

    param, grad, exp_avg (m) and exp_avg_sq (v) all have the parameter's shape; step t counts from 1.

    Hints:
      1. Decoupled weight decay first: param ← param · (1 - lr · weight_decay). It never touches m or v.
      2. Moments: m ← beta1 · m + (1 - beta1) · g and v ← beta2 · v + (1 - beta2) · g², in place
         (mul_, add_, addcmul_ or lerp_) so the optimiser's state keeps them.
      3. Bias correction: m_hat = m / (1 - beta1^t), v_hat = v / (1 - beta2^t).
         With correct_bias=False skip it: m_hat = m and v_hat = v.
      4. Step: param ← param - lr · m_hat / (sqrt(v_hat) + eps). eps goes outside the square root, as in torch.
      5. Update param, m and v in place (the optimiser's state holds m and v between steps); return None.
    """
    ### BEGIN SOLUTION
    param.mul_(1 - lr * weight_decay)  # decoupled: shrink the weights, not the gradient
    exp_avg.lerp_(grad, 1 - beta1)  # m_t = beta1 · m + (1 - beta1) · g
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)  # v_t = beta2 · v + (1 - beta2) · g²
    bias_correction1 = 1 - beta1 ** step if correct_bias else 1.0
    bias_correction2 = 1 - beta2 ** step if correct_bias else 1.0
    denom = (exp_avg_sq.sqrt() / bias_correction2 ** 0.5).add_(eps)  # sqrt(v_hat) + eps
    param.addcdiv_(exp_avg, denom, value=-lr / bias_correction1)  # - lr · m_hat / (sqrt(v_hat) + eps)
    ### END SOLUTION


def _check_correct_bias(value) -> None:
    if not isinstance(value, bool):
        raise UsageError(f"AdamW correct_bias must be True or False, got {value!r}")


class AdamW(torch.optim.Optimizer):
    """AdamW over parameter groups: `torch.optim.AdamW`'s update behind CS224N minBERT's constructor.

    The defaults are that project's (eps 1e-6, weight_decay 0.0), not torch's (eps 1e-8, weight_decay 1e-2):
    `AdamW(params, lr, betas, eps, weight_decay)` equals `torch.optim.AdamW(params, lr, betas, eps,
    weight_decay)` step for step only when both get the same values, so pass them explicitly to compare.
    `correct_bias=False` (per group too) drops the bias correction of m and v.

    State per parameter: `step` (int), `exp_avg` (m) and `exp_avg_sq` (v), created at the first step that
    sees a gradient. Parameters whose .grad is None are skipped, as in torch.
    """

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.0, correct_bias: bool = True):
        if not lr >= 0.0:
            raise UsageError(f"AdamW lr must be >= 0, got {lr!r}")
        if not all(0.0 <= b < 1.0 for b in betas) or len(betas) != 2:
            raise UsageError(f"AdamW betas must be two numbers in [0, 1), got {betas!r}")
        if not eps >= 0.0 or not weight_decay >= 0.0:
            raise UsageError(f"AdamW eps and weight_decay must be >= 0, got {eps!r} and {weight_decay!r}")
        _check_correct_bias(correct_bias)
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay,
                                  "correct_bias": correct_bias})

    def add_param_group(self, param_group: dict) -> None:
        """torch's, plus a check of a group's own correct_bias."""
        super().add_param_group(param_group)
        _check_correct_bias(self.param_groups[-1]["correct_bias"])

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        for group in self.param_groups:  # state dicts saved before correct_bias existed
            group.setdefault("correct_bias", True)

    @torch.no_grad()
    def step(self, closure=None):
        """One update of every parameter that has a gradient; `closure` re-evaluates the loss, as in torch."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise UsageError("AdamW does not support sparse gradients")
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["step"] += 1
                adamw_update(p, p.grad, state["exp_avg"], state["exp_avg_sq"], state["step"], group["lr"],
                             beta1, beta2, group["eps"], group["weight_decay"], correct_bias=group["correct_bias"])
        return loss
