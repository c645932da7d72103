"""The runtime beside the lesson: what runs a lesson's code but is not what it teaches.

Entry points (the command line, the notebooks' kernel, a notebook's parameter check), the environment (one-line
errors, atomic run files and locks, progress bars, OpenMP's wait policy), and speed and service options of a run
(CPU kernels, `torch.compile`, trackers, export, predict). A student reads `model/`, `methods/`, `tasks/` and
`training/`; STRUCTURE.md draws the layers.
"""
