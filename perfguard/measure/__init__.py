"""Measuring a model: clocks, warm-up and sampling, memory, compile time, drift."""
