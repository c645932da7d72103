"""The runtime beside the lesson: what runs a lesson's code but is not what it teaches.

Entry points (the command line, the notebooks' kernel), the environment (one-line errors, atomic run files, a run
folder's lock and checkpoint, progress bars, OpenMP's wait policy, the config framework, the registry type), and
speed and service options of a run (CPU kernels, `torch.compile`, trackers, export, predict). A student reads `model/`, `methods/`, `tasks/` and
`training/`; STRUCTURE.md draws the layers.
"""
