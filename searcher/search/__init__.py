"""The search core: the knob space, evaluation, strategies, the Pareto front and the run."""
