"""Runs in bulk: sweeps, notebooks by papermill, results tables and the papers' numbers."""
