"""Measurements: speed against Hugging Face, method costs, diagnostics, the GPU check."""
