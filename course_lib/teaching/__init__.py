"""Assignment mode: the public checks, their references, the student copy and the grader."""
