"""The runtime's base, below the model: what runs a lesson's code but is not what it teaches.

One-line errors, seeding and atomic run files, a run folder's lock and checkpoint, progress bars, OpenMP's wait
policy, the config framework, the registry type, the encoded-data cache, and two of the loop's options
(`torch.compile`, trackers). The entry points sit at the package's root (`cli.py`, `kernel.py`), the CPU kernels
in `fast/`, export and predict in `training/`; STRUCTURE.md draws the layers.
"""
