"""The lab: the research machinery around the lesson (grids, sweeps, notebooks in batch, the archive of runs and
its results tables, the papers' numbers, benchmarks and the GPU check). The lesson never imports it
(`tests/test_layers.py`); a notebook imports it in the cell that runs its experiment."""
