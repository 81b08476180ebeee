"""Ground truth: real steps measured on a GPU, traced on fake tensors, and the accuracy report."""
