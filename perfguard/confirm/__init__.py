"""Confirmation: latency verdicts measured again before they stand.

A stored baseline carries the offset of the process that measured it, and so does this run.
So after comparing with a stored baseline, each latency regression or improvement is measured
again (`--perfguard-confirm` rounds), beside the base commit when the checkout has it, else
in a fresh process; the items whose median moved without a verdict are measured beside the
base commit too, to be settled. Same-job A/B has the same problem on a smaller scale (its
two worker processes differ by an offset of their own), and measures its flags again beside
the base commit by a fresh pair of processes (`confirm_same_job`).

- `targets`: which items a round measures;
- `checks`: a round's own checks (its base side against the base commit's stored figures);
- `judge`: what the rounds say about each verdict, as a typed `Confirmation` per comparison;
- `step`: the step itself, as the pipeline runs it (with the retry of a disturbed round).

The measuring is not here: the pytest plugin runs a child session (`Remeasure`), and
`perfguard merge` replays the shards' rounds (`replay`).
"""

from perfguard.confirm.judge import confirm_verdicts
from perfguard.confirm.step import (
    ConfirmRound,
    Remeasure,
    confirm,
    confirm_same_job,
    replay,
    with_rounds,
)
from perfguard.confirm.targets import confirm_targets, is_flagged_latency, settle_targets

__all__ = [
    "ConfirmRound",
    "Remeasure",
    "confirm",
    "confirm_same_job",
    "confirm_targets",
    "confirm_verdicts",
    "is_flagged_latency",
    "replay",
    "settle_targets",
    "with_rounds",
]
