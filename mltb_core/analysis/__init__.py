"""What a run produces and how it is read: trial records, statistics, tables, baselines, reports."""
