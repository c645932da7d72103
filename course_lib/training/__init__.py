"""Training: the one loop, and fine-tuning, multitask and pre-training jobs on it."""
