"""After measuring: choose the baseline, compare, explain, write the results and the report,
save.

A plain library step (no pytest): the plugin calls it at session end, `perfguard merge` for
a run's shards, and a script that measured with `measure_model` can call it the same way:
`finish_run(Measured(results, environment), FinishSettings(...))`. One module per step:

- `baseline`: which commit the run is compared with, and its stored record, read once
  (`Baseline`, `resolve_baseline`);
- `compare`: against the stored record (history's noise floor, confirmation rounds), or the
  base measured beside it in the same job;
- `explain`: where a memory verdict's bytes went;
- `write`: the results file, the report, and the baseline of HEAD;
- `finish`: the steps in their order (`finish_run`);
- `inputs`: what the steps take and give.
"""

from perfguard.pipeline.baseline import Baseline, check_can_save, choose_baseline, resolve_baseline
from perfguard.pipeline.finish import finish_run
from perfguard.pipeline.inputs import (
    BaseMeasuredBeside,
    FinishSettings,
    Measured,
    PipelineError,
    PipelineOutcome,
    Steps,
)

__all__ = [
    "BaseMeasuredBeside",
    "Baseline",
    "FinishSettings",
    "Measured",
    "PipelineError",
    "PipelineOutcome",
    "Steps",
    "check_can_save",
    "choose_baseline",
    "finish_run",
    "resolve_baseline",
]
