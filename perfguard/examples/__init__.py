"""Small models for the example suite, the tests and the benchmarks (no torchvision needed)."""

from perfguard.examples.models import SmallCNN, SmallEncoder, SmallMLP, example_inputs

__all__ = ["SmallCNN", "SmallEncoder", "SmallMLP", "example_inputs"]
