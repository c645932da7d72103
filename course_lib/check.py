"""`python -m course_lib.check q1a` (or `all`): a question's public checks, on a CPU in seconds.

The command-line name; the code is `course_lib.teaching.check`."""
import sys

from course_lib.teaching.check import main

if __name__ == "__main__":
    sys.exit(main())
