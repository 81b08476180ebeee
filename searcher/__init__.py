"""fitplan's search and user-facing layers: the knob space, strategies, Pareto front, CLI, emitters."""
