import sys

from course_lib.cli import main

sys.exit(main())
