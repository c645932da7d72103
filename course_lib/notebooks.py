"""The notebooks' plumbing: checked parameters, presets, results, and running a notebook with papermill.

The command-line name; the code is `course_lib.experiments.notebooks`."""
import sys

from course_lib.experiments.notebooks import main

if __name__ == "__main__":
    sys.exit(main())
