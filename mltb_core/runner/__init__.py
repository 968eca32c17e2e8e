"""Running one trial (or an expert pipeline) end to end, confined apart from the grader."""
