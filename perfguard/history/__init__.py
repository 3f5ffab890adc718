"""Main's history: its per-commit series, change points, the trend site and the alert."""
