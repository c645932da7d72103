"""Task families and their data, heads and metrics; GLUE is one family."""
