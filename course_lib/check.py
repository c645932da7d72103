"""`python -m course_lib.check`: the old name of `python -m course_lib check`, kept for one release."""
import sys

from course_lib.cli import alias

if __name__ == "__main__":
    sys.exit(alias("check"))
