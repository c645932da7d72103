"""Random numbers every CPU draws alike, for tests that compare with numbers computed on another machine.

torch's float32 `normal_` and `uniform_` take vector kernels whose rounding depends on the CPU path (AVX-512,
AVX2, the plain kernels of ATEN_CPU_CAPABILITY=default, Arm's), and its float64 draws call the C library's log
and cos, which differ between libraries in the last bit. The seeded Mersenne Twister's integers are the same
everywhere, and so is exact arithmetic on them: the sum of twelve uniforms on a 2^-24 grid, less 6, has mean 0
and variance 1 (the Irwin-Hall bell curve) and is computed with no rounding at all; scaling it by a standard
deviation is one IEEE multiplication, correctly rounded on every CPU. So a model drawn here has the same float64
weights on any machine, and a stored number computed from it differs between machines only by how each rounds
the computation itself."""
import torch

GRID = 2 ** 24  # each uniform is k / 2^24: twelve of them sum exactly in float64


def normal(generator: torch.Generator, shape, std: float = 1.0, mean: float = 0.0) -> torch.Tensor:
    """float64 draws of mean `mean` and standard deviation `std` (Irwin-Hall, 12 terms; tails end at 6 std)."""
    ints = torch.randint(0, GRID, (*shape, 12), generator=generator, dtype=torch.int64)
    return mean + (ints.sum(-1).double() / GRID - 6.0) * std


def bert_init(model: torch.nn.Module, seed: int, std: float = 0.02) -> torch.nn.Module:
    """BERT's init drawn portably, in float64: every entry BERT's init drew is drawn again as N(0, std²); the
    entries it set (biases' zeros, LayerNorms' ones, the padding row's zeros) stay as they are."""
    generator = torch.Generator().manual_seed(seed)
    model.double()
    with torch.no_grad():
        for p in model.parameters():
            drawn = (p != 0) & (p != 1)
            p.copy_(torch.where(drawn, normal(generator, p.shape, std), p))
    return model
