"""perfguard's version: a leaf, so that what records it (a run's environment, `perfguard
--version`, `perfguard init`'s pin) imports nothing else of the package."""

__version__ = "0.1.0"
