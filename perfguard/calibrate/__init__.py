"""`perfguard calibrate`: what this runner can detect, shown with known slowdowns.

The selected perf items are measured as a pull request's A/B measures them, both sides the
same tree, for many rounds on the same two worker processes, some rounds with one side's
calls made slower by a known share (canaries, `measure.canary`). `record` is what the driving
session writes, `analysis` judges it as the pull request's check would, `render` writes the
table.
"""

from perfguard.calibrate.analysis import analyze, flagged_before_correction
from perfguard.calibrate.record import Calibration, CalibrationError, merged, schedule
from perfguard.calibrate.report import Report

__all__ = [
    "Calibration",
    "CalibrationError",
    "Report",
    "analyze",
    "flagged_before_correction",
    "merged",
    "schedule",
]
