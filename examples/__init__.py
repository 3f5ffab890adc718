"""The example suite and the demos (`make demo`, `make demo-history`)."""
