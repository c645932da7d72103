"""`python -m course_lib.collect RUNS_DIR`: one table of dev-set results from the finished runs in a folder.

The command-line name; the code is `course_lib.experiments.collect`."""
import sys

from course_lib.experiments.collect import main

if __name__ == "__main__":
    sys.exit(main())
