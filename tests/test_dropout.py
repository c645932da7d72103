"""The 16-bit dropout: the right drop rate, an unbiased expectation, the usual gradient."""
import torch

from course_lib.fast.dropout import Dropout, dropout


def test_drop_rate_and_expectation():
    torch.manual_seed(0)
    x = torch.ones(1_000_003)  # not a multiple of four lanes
    y = dropout(x, 0.1)
    kept = (y != 0).float().mean().item()
    stderr = (0.1 * 0.9 / x.numel()) ** 0.5
    assert abs((1 - kept) - 0.1) < 4 * stderr
    assert abs(y.mean().item() - 1.0) < 4 * stderr / 0.9
    torch.testing.assert_close(y.unique(), torch.tensor([0.0, 65536 / (65536 - 6554)]))


def test_identity_when_off_and_gradient_is_mask_times_scale():
    x = torch.randn(64, 33, requires_grad=True)
    assert dropout(x, 0.0) is x and dropout(x, 0.5, training=False) is x
    layer = Dropout(0.3).train()
    y = layer(x)
    y.sum().backward()
    torch.testing.assert_close(x.grad, (y != 0).float() * 65536 / (65536 - round(0.3 * 65536)))
    assert torch.equal(Dropout(0.3).eval()(x), x)


def test_lanes_are_independent_of_position():
    torch.manual_seed(1)
    y = dropout(torch.ones(400_000, 4), 0.25)
    per_lane = (y == 0).float().mean(0)  # each of the four 16-bit lanes of a 64-bit draw
    assert ((per_lane - 0.25).abs() < 0.01).all(), per_lane
