"""`python -m course_lib.sweep GRID.yaml`: run a grid of fine-tuning runs or notebooks, one child process each.

The command-line name; the code is `course_lib.experiments.sweep`."""
import sys

from course_lib.experiments.sweep import main

if __name__ == "__main__":
    sys.exit(main())
