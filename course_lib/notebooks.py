"""`python -m course_lib.notebooks`: the old name of `python -m course_lib notebooks`, kept for one release."""
import sys

from course_lib.cli import alias

if __name__ == "__main__":
    sys.exit(alias("notebooks"))
