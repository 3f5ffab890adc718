"""Studies and benchmarks whose figures the README and docs quote."""
