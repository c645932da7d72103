"""The model layer: plain PyTorch BERT, attention, heads and weight loading. It imports nothing above it."""
