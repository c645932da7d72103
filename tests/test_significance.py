"""The lab's statistics against scipy, hand computations, an integral and a simulation: the paired t-test, Holm's
correction, and the difference a number of seeds can detect."""
import math
import warnings

import numpy as np
import pytest
from scipy import integrate, stats

from course_lib.lab.significance import detectable_difference, holm_adjusted, paired_t_test, seeds_to_detect

# ----------------------------------------------------------------------------------------------
# The paired t-test over seeds (collect.paired_tests, benchmarks diagnostics)


def test_paired_t_test_matches_scipy_ttest_rel():
    rng = np.random.default_rng(0)
    for n in (2, 3, 5, 10):
        base = rng.uniform(0.6, 0.9, n)
        ours = base + rng.normal(0.01, 0.02, n)
        diff, p = paired_t_test(ours, base)
        assert diff == pytest.approx(ours.mean() - base.mean(), abs=1e-15)
        assert p == pytest.approx(stats.ttest_rel(ours, base).pvalue, rel=1e-12)
        assert type(diff) is float and type(p) is float
    # two seeds by hand: differences 0.02 and 0.04, mean 0.03, sd 0.01 * sqrt(2), t = 3 with 1 df
    diff, p = paired_t_test([0.82, 0.84], [0.80, 0.80])
    assert diff == pytest.approx(0.03) and p == pytest.approx(1 - 2 * math.atan(3) / math.pi)  # Cauchy tails


def test_paired_t_test_without_a_test_to_make():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning from scipy on equal pairs
        assert paired_t_test([0.8], [0.75]) == (pytest.approx(0.05), None)  # one pair: no spread to test
        assert paired_t_test([0.5, 0.7, 0.9], [0.5, 0.7, 0.9]) == (0.0, None)  # equal pairs: scipy's NaN
        assert paired_t_test([0.75, 0.5, 0.25], [0.5, 0.25, 0.0]) == (0.25, None)  # the same gain on every seed
        assert paired_t_test([0.7, 0.8, 0.9], [0.6, 0.7, 0.8])[1] is None  # the same gain, up to float rounding
    with pytest.raises(ValueError, match="equally long"):
        paired_t_test([0.8, 0.9], [0.8])
    with pytest.raises(ValueError, match="non-empty"):
        paired_t_test([], [])


def test_holm_adjusted_p_values_match_the_step_down_rule_by_hand():
    # sorted 0.01, 0.02, 0.04 (m = 3): 3 * 0.01, max(0.03, 2 * 0.02), max(0.04, 1 * 0.04); None is not a test
    adjusted = holm_adjusted([0.04, None, 0.01, 0.02])
    assert adjusted[1] is None and adjusted[0] == pytest.approx(0.04) and adjusted[2] == pytest.approx(0.03)
    assert adjusted[3] == pytest.approx(0.04) and holm_adjusted([0.6, 0.5]) == pytest.approx([1.0, 1.0])


# ----------------------------------------------------------------------------------------------
# What a paired t-test over n seeds can detect (benchmarks reproduce)


def test_detectable_difference_has_the_power_asked_for():
    for n in (2, 3, 5, 10, 30):
        delta = detectable_difference(0.02, n)
        # power computed back from the answer, from its definition rather than scipy's nct: t = (Z + nc) / S with
        # S^2 = V / df, V chi-square; |t| > c exactly when Z + nc lies outside +-c S, averaged over V
        df, critical, noncentrality = n - 1, stats.t.ppf(0.975, n - 1), delta * math.sqrt(n) / 0.02

        def rejected(v, df=df, critical=critical, noncentrality=noncentrality):
            bound = critical * math.sqrt(v / df)
            outside = stats.norm.sf(bound - noncentrality) + stats.norm.cdf(-bound - noncentrality)
            return outside * stats.chi2.pdf(v, df)
        power = integrate.quad(rejected, 0, np.inf, epsabs=1e-12, limit=200)[0]
        assert power == pytest.approx(0.8, abs=1e-7)
    # the same by simulation, with no noncentral t at all: 40000 five-seed experiments with that true difference
    rng = np.random.default_rng(0)
    gaps = rng.normal(detectable_difference(1.0, 5), 1.0, size=(40_000, 5))
    t = gaps.mean(axis=1) / (gaps.std(axis=1, ddof=1) / math.sqrt(5))
    assert np.mean(np.abs(t) > stats.t.ppf(0.975, 4)) == pytest.approx(0.8, abs=0.006)  # 3 binomial sds
    assert detectable_difference(0.02, 3, alpha=0.01, power=0.9) > detectable_difference(0.02, 3)


def test_seeds_to_detect_is_the_first_seed_count_whose_detectable_difference_reaches_the_claim():
    for sd, claim in ((0.02, 0.009), (0.02, -0.009), (0.01, 0.03), (0.005, 0.001)):
        n = seeds_to_detect(sd, claim)
        assert detectable_difference(sd, n) <= abs(claim) and (n == 2 or detectable_difference(sd, n - 1) > abs(claim))
    z = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)
    assert seeds_to_detect(0.02, 0.009) == pytest.approx((z * 0.02 / 0.009) ** 2, rel=0.1)  # ~39 seeds: normal
    assert seeds_to_detect(0.02, 0.0001) is None and seeds_to_detect(0.02, 0.0) is None  # past 1000; no claim
    assert seeds_to_detect(None, 0.01) is None

def test_detectable_difference_shrinks_with_seeds_towards_the_normal_formula():
    values = [detectable_difference(1.0, n) for n in range(2, 40)]
    assert all(a > b for a, b in zip(values, values[1:]))
    z = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)  # 1.960 + 0.842: the large-n limit, times sd / sqrt(n)
    assert detectable_difference(1.0, 20_000) * math.sqrt(20_000) == pytest.approx(z, rel=1e-3)
    assert detectable_difference(1.0, 10) * math.sqrt(10) > z * 1.1  # with 10 seeds the t's tails still cost 12%
    assert detectable_difference(0.5, 7) == pytest.approx(detectable_difference(1.0, 7) / 2, rel=1e-12)
    assert detectable_difference(0.0, 5) == 0.0  # no noise: any difference shows


def test_detectable_difference_without_a_test_to_make():
    assert detectable_difference(0.02, 1) is None and detectable_difference(0.02, 0) is None
    assert detectable_difference(math.nan, 5) is None and detectable_difference(math.inf, 5) is None
    assert detectable_difference(None, 5) is None
    with pytest.raises(ValueError, match="alpha < power"):
        detectable_difference(0.02, 5, alpha=0.05, power=0.04)
