"""`python -m course_lib.collect`: the old name of `python -m course_lib collect`, kept for one release."""
import sys

from course_lib.cli import alias

if __name__ == "__main__":
    sys.exit(alias("collect"))
