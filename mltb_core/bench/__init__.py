"""The benchmark: task specs, data sources, held-out splits, metrics, leaderboards and the grader."""
