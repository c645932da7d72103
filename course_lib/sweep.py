"""`python -m course_lib.sweep`: the old name of `python -m course_lib sweep`, kept for one release."""
import sys

from course_lib.cli import alias

if __name__ == "__main__":
    sys.exit(alias("sweep"))
