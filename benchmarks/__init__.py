"""Measurements beside the package, as PyTorch's and transformers' `benchmarks/`: each one side by side in one run
against its reference, printing ratios, for a `results/*.md` page that names its command. Run from the repository
root: `python -m benchmarks WHAT ...` (`--help` lists them), `bash ci/gpu_check.sh`, `python benchmarks/data_cache.py`.
Nothing in `course_lib` imports them."""
