import sys

from course_lib.runtime.cli import main

sys.exit(main())
