"""Statistics and verdicts: pure functions, no torch, no pytest."""
