"""Whether one method beats another over the same seeds: the paired t-test the results tables report
(`collect.paired_tests`, notebook 06, `python -m benchmarks reproduce` and `diagnostics`), Holm's correction over a
table's rows, and how large a difference that test can find with a given number of seeds (`detectable_difference`,
`seeds_to_detect`). From scipy; the lab's, not the lesson's: no training run reads them."""
from __future__ import annotations

import math
import statistics
import warnings
from collections.abc import Sequence

import numpy as np
from scipy import optimize, stats

ArrayLike = Sequence[float] | np.ndarray

def paired_t_test(ours: ArrayLike, theirs: ArrayLike) -> tuple[float, float | None]:
    """Mean of ours minus mean of theirs, and the two-sided p-value of the paired t-test (scipy.stats.ttest_rel).

    ours[i] and theirs[i] are the two methods' runs with seed i, which share data order and initialisation, so
    the test sees the method's effect and not the seed's. p is None with fewer than 2 pairs, and wherever the
    pairs' differences have no spread (within float rounding): every pair equal, or every pair apart by the same
    amount. scipy answers NaN for the first and p = 0 (an infinite t) for the second, which would read as a
    certain effect; with no spread there is nothing to test against, and the callers say so.
    """
    x, y = np.asarray(ours, dtype=float), np.asarray(theirs, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or len(x) == 0:
        raise ValueError(f"need two equally long, non-empty 1-D sequences of paired runs, got shapes "
                         f"{x.shape} and {y.shape}")
    difference = statistics.fmean(x) - statistics.fmean(y)
    gaps = x - y
    if len(x) < 2 or np.ptp(gaps) <= 1e-12 * max(1.0, float(np.abs(gaps).max())):
        return difference, None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # nearly equal pairs: scipy's precision-loss warning
        p = float(stats.ttest_rel(x, y).pvalue)
    return difference, None if math.isnan(p) else p


def holm_adjusted(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values, in the input's order (None stays None and is not counted).

    With m tests sorted p_(1) <= ... <= p_(m), the k-th adjusted value is max over j <= k of
    min(1, (m - j + 1) p_(j)); a test is significant at level alpha after the correction exactly when its
    adjusted value is below alpha. This controls the chance of any false claim across one table's rows.
    """
    tested = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(tested):
        running = max(running, min(1.0, (len(tested) - rank) * p))
        adjusted[i] = running
    return adjusted


def detectable_difference(sd_diff: float | None, n: int, alpha: float = 0.05, power: float = 0.8) -> float | None:
    """The smallest true mean paired difference that a two-sided paired t-test over n pairs finds at level alpha
    with the given power, when the pairs' differences have standard deviation sd_diff (in sd_diff's units).

    With the true difference delta, t = mean / (s / sqrt(n)) follows a noncentral t with n - 1 degrees of freedom
    and noncentrality delta sqrt(n) / sd_diff; the test rejects when |t| exceeds the t quantile 1 - alpha / 2.
    The noncentrality whose rejection rate equals `power` is found with a root finder (exact, no normal
    approximation: with few pairs the t's heavy tails matter). For large n the answer approaches
    (z_(1 - alpha/2) + z_power) sd_diff / sqrt(n). None for n < 2 (no test) or sd_diff missing or not finite.
    """
    if sd_diff is None or n < 2 or not math.isfinite(sd_diff):
        return None
    if not 0 < alpha < 1 or not alpha < power < 1:
        raise ValueError(f"need 0 < alpha < power < 1, got alpha={alpha} and power={power}")
    df = n - 1
    critical = float(stats.t.ppf(1 - alpha / 2, df))

    def shortfall(noncentrality: float) -> float:  # rejection rate minus the power asked for; alpha - power at 0
        # P(t < -critical) as P(-t > critical), the noncentrality negated: scipy's lower tail of nct turns NaN
        # far out (df 1, noncentrality 8), its upper tail does not
        rate = stats.nct.sf(critical, df, noncentrality) + stats.nct.sf(critical, df, -noncentrality)
        return float(rate) - power

    high = 1.0
    while shortfall(high) < 0:
        high *= 2
    noncentrality = optimize.brentq(shortfall, 0.0, high, xtol=1e-12, rtol=1e-12)
    return noncentrality * abs(float(sd_diff)) / math.sqrt(n)


def seeds_to_detect(sd_diff: float | None, delta: float, alpha: float = 0.05, power: float = 0.8,
                    most: int = 1000) -> int | None:
    """The fewest pairs (seeds) whose `detectable_difference` is at most |delta|: how many seeds a claimed gain
    needs to show at this seed noise. None past `most` seeds, for delta 0, or without a noise to go by."""
    if sd_diff is None or not math.isfinite(sd_diff) or delta == 0:
        return None
    low, high = 2, most  # detectable_difference falls as n grows: bisect for the first n that reaches |delta|
    if detectable_difference(sd_diff, high, alpha, power) > abs(delta):
        return None
    while low < high:
        middle = (low + high) // 2
        if detectable_difference(sd_diff, middle, alpha, power) <= abs(delta):
            high = middle
        else:
            low = middle + 1
    return low
