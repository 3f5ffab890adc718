"""The `perfguard` fixture object: `perfguard.run(model, example_inputs, **options)` measures
a forward call, `perfguard.train_step(model, example_inputs, loss_fn=..., optimizer=...)` a
training step."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import pytest

from perfguard.bounds import check
from perfguard.pytest_plugin.ab.protocol import Result
from perfguard.pytest_plugin.collection import test_id, test_of
from perfguard.pytest_plugin.marker import settings_of
from perfguard.pytest_plugin.options import trace_dir
from perfguard.records import VariantResult
from perfguard.settings import MARKER_KEYS, THRESHOLD_KEYS, MarkerSettings

if TYPE_CHECKING:
    from perfguard.measure.compile_cache import CompileCache
    from perfguard.measure.drift import Reference
    from perfguard.measure.job import Job, MeasureSettings
    from perfguard.pytest_plugin.roles import Role
    from perfguard.pytest_plugin.state import SessionState
    from perfguard.variants.workload import Workload

# the marker keys that `perfguard.run(...)` takes too: how to measure, not how to judge
ITEM_KEYS = ("variants", "timeout_s", "depends")  # marker keys of the item as a whole, not of run()
RUN_OPTIONS = tuple(k for k in MARKER_KEYS if k not in ITEM_KEYS and k not in THRESHOLD_KEYS)
REFERENCE_CACHE = 8
SAMPLED = ("budget_s", "repeats", "op_blocks")  # the sampling settings a test may set


def for_item(item: pytest.Item, role: Role, variant: str) -> PerfguardFixture:
    """The fixture's object for one perf item (its settings read where its test's items
    were made), in the session of `role`; the seeds set, so that random weights match in
    every variant and run."""
    settings = settings_of(item)
    marker = settings.marker if settings is not None else MarkerSettings(None, {})
    if role.measures_here():  # an A/B driver leaves the measuring to its workers
        _seed(role.state.options.seed)
    return PerfguardFixture(test_id(item, variant), variant, marker, role, item.nodeid)


def _seed(seed: int) -> None:
    """The same random weights in every variant and every run."""
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:  # pragma: no cover - numpy comes with torch
        pass
    import torch

    torch.manual_seed(seed)


class PerfguardFixture:
    """Measures the model of a test under the variant of the current test item."""

    def __init__(
        self, test: str, variant: str, marker: MarkerSettings, role: Role, nodeid: str
    ) -> None:
        self.test = test
        self.variant = variant
        self._marker = marker
        self._role = role
        self._nodeid = nodeid
        self.result: VariantResult | None = None

    @property
    def _state(self) -> SessionState:
        return self._role.state

    def run(
        self,
        model: Any,
        example_inputs: Any,
        *,
        kwargs: Mapping[str, Any] | None = None,
        batch: int | None = None,
        **options: Any,
    ) -> VariantResult:
        """Measure `model(*example_inputs, **kwargs)` under this item's variant and record it.

        `kwargs` holds keyword inputs (`{"attention_mask": mask}`), given to every variant.
        `batch`: items per call for `throughput_per_s` (default: the first input's leading
        dimension).

        `options` (budget_s, repeats, drift_tolerance, device, threads) override the marker's
        and the session's. A variant that cannot run here skips the item; a model that raises
        fails it with the model's message; drift beyond tolerance fails it.
        """
        return self._measure("run", model, example_inputs, kwargs, batch, options, None)

    def train_step(
        self,
        model: Any,
        example_inputs: Any,
        *,
        loss_fn: Callable[[Any], Any],
        optimizer: Callable[[list[Any]], Any],
        kwargs: Mapping[str, Any] | None = None,
        batch: int | None = None,
        **options: Any,
    ) -> VariantResult:
        """Measure one training step of `model` under this item's variant and record it:
        zero_grad, `output = model(*example_inputs, **kwargs)`, `loss_fn(output)` (a scalar;
        targets closed over), backward, optimizer step.

        `optimizer` is a factory called with the trainable parameters
        (`lambda params: torch.optim.AdamW(params, lr=1e-4)`): each variant trains its own copy
        of the model with its own optimizer, from the same weights and random state, and the
        caller's model is left as it was. Drift is judged on the first step's loss and
        gradients. Inference-only variants (int8, pruning, onnxruntime) skip the item.
        `batch` and `options` as for `run`.
        """
        from perfguard.variants.training import TrainStep

        if not callable(loss_fn) or not callable(optimizer):
            raise TypeError(
                "perfguard.train_step() needs loss_fn=(output -> scalar loss) and "
                "optimizer=(params -> optimizer), e.g. lambda p: torch.optim.AdamW(p)"
            )
        training = TrainStep(loss_fn=loss_fn, optimizer=optimizer)
        return self._measure("train_step", model, example_inputs, kwargs, batch, options, training)

    def generate(
        self,
        model: Any,
        input_ids: Any,
        *,
        max_new_tokens: int,
        kwargs: Mapping[str, Any] | None = None,
        batch: int | None = None,
        **options: Any,
    ) -> VariantResult:
        """Measure greedy generation by `model.generate` (a Hugging Face-style model) under
        this item's variant and record it: each sample one whole generation of exactly
        `max_new_tokens` new tokens after the prompt `input_ids` (an end-of-sequence token
        ends nothing), with the time to the first token (TTFT), per output token after it
        (TPOT) and new tokens per second. `kwargs` go to `generate` (an attention mask).
        Drift: the first two new tokens' logits against eager's in fp64, and the new tokens
        against eager's. Compiled variants use a static cache and compile the decode step;
        onnxruntime skips. `batch` and `options` as for `run`.
        """
        from perfguard.variants.generation import Generation, GenerationError

        try:
            generation = Generation(max_new_tokens)
        except GenerationError as exc:
            raise TypeError(f"perfguard.generate(): {exc}") from None
        return self._measure("generate", model, (input_ids,), kwargs, batch, options, generation)

    def distributed(
        self,
        build: Callable[[int, int], Callable[[], Any]],
        *,
        world_size: int,
        backend: str | None = None,
        **options: Any,
    ) -> VariantResult:
        """Measure one step across `world_size` ranks that perfguard starts, and record it.

        `build(rank, world_size)`, a function at the top level of a module, runs in each
        rank once its process group is up (gloo on a CPU, NCCL one GPU a rank) and returns
        the step to time there. The step's latency is the slowest rank's
        (`perfguard.measure.distributed`); `options` as for `run`.
        """
        from perfguard.measure.distributed import DistributedJob, measure_distributed
        from perfguard.measure.sampling import sample
        from perfguard.pytest_plugin import timeout

        options = self._check_call("distributed", options)
        if self._role.counting is not None:
            pytest.skip("instruction counts are of forward calls, not distributed steps")
        settings, seed = self._settings(options, None), self._state.options.seed
        job = DistributedJob.of(
            build, world_size, backend, settings, test=self.test, variant=self.variant, seed=seed
        )
        self._state.progress.start(self._nodeid)
        worker = self._role.link
        recording = self._role.recording
        recorder = (
            None if recording is None or not recording.recorder.recording else recording.recorder
        )
        context = None if recorder is None else recorder.context
        result = measure_distributed(
            job,
            progress=self._state.progress,
            sampler=sample if worker is None else worker.sampler(None),
            turn=None if worker is None else worker.wait_turn,
            left=timeout.remaining,
            # the ranks record what they run, as the recording would here
            recorded=None if recorder is None else lambda ran: recorder.add(str(context), ran),
            record_root=None if recorder is None else recorder.root,
        )
        return self._recorded(result)

    def _recorded(self, result: VariantResult) -> VariantResult:
        """Keep the item's result (and send it to the driver, in A/B); the item then skips
        or fails as its result says."""
        worker = self._role.link
        if worker is not None:
            worker.send(Result(self._nodeid, result.to_json(), self._state.environment))
        self.result = result
        self._state.record(result, self._nodeid)
        _end_item(self.variant, result)
        return result

    def _measure(
        self,
        name: str,
        model: Any,
        example_inputs: Any,
        kwargs: Mapping[str, Any] | None,
        batch: int | None,
        options: Mapping[str, Any],
        work: Workload | None,
    ) -> VariantResult:
        from perfguard.measure.job import Job
        from perfguard.measure.residency import residency_for
        from perfguard.measure.runner import measure_model
        from perfguard.measure.sampling import sample
        from perfguard.measure.tracers import timed_alone

        options = self._check_call(name, options)
        job = Job.of(
            model,
            example_inputs,
            self.variant,
            self._settings(options, batch),
            kwargs=kwargs,
            work=work,
            test=self.test,
            caller=f"perfguard.{name}()",
        )
        if self._role.counting is not None:
            if job.work.name != "forward":
                pytest.skip(
                    "instruction counts are of forward calls, not training steps or generations"
                )
            self._count(job)
        progress = self._state.progress
        progress.start(self._nodeid)
        worker = self._role.link
        residency = None if worker is None else residency_for(job)
        reference = self._reference(job)  # the untimed call a recording session records
        recording = self._role.recording
        if recording is not None:
            recording.record_work(job, test_of(self._nodeid))
        paused = contextlib.nullcontext() if recording is None else recording.recorder.paused()
        with paused, timed_alone() as tracer:
            result = measure_model(
                job,
                reference=reference,
                progress=progress,
                sampler=sample if worker is None else worker.sampler(residency),
                turn=None if worker is None else worker.wait_turn,
            )
        if tracer is not None and self._state.environment is not None:
            self._state.environment["tracer"] = tracer  # it timed under another's tracer
        if residency is not None:
            result = residency.annotate(result)
        return self._recorded(result)

    def _check_call(self, name: str, options: Mapping[str, Any]) -> dict[str, Any]:
        """This call's options, checked as the table says (a bad one is a TypeError naming
        it); the model and its inputs are checked by the job (`Job.of`)."""
        unknown = set(options) - set(RUN_OPTIONS)
        if unknown:
            raise TypeError(
                f"perfguard.{name}() got unknown option(s) {sorted(unknown)}; "
                f"known: {', '.join(('batch', *RUN_OPTIONS))}"
            )
        if self.result is not None:
            raise RuntimeError(
                f"perfguard.{name}() measures one model per test item; the item already "
                "measured one (call run or train_step once per test)"
            )
        return {
            k: check(MARKER_KEYS[k], v, f"perfguard.{name}(): {k}", error=TypeError)
            for k, v in options.items()
        }

    def _settings(self, options: Mapping[str, Any], batch: int | None) -> MeasureSettings:
        """The session's settings, then the marker's, then this call's."""
        from perfguard.measure.job import MeasureSettings
        from perfguard.measure.sampling import SamplingSettings

        o = self._state.options
        merged: dict[str, Any] = {
            "budget_s": o.budget_s,
            "repeats": o.repeats,
            "op_blocks": o.op_blocks,
            "device": o.device,
            "threads": o.threads,
            "drift_tolerance": None,
            "shapes": (),
        }
        merged.update({k: v for k, v in self._marker.options.items() if k in RUN_OPTIONS})
        merged.update(options)
        # where this tree loosened the base's (its ini, marker or this call), the base's
        merged.update(self._role.floor(self._nodeid))
        return MeasureSettings(
            sampling=SamplingSettings(**{k: merged[k] for k in SAMPLED}),
            device=str(merged["device"]),
            threads=merged["threads"],
            drift_tolerance=merged["drift_tolerance"],
            shapes=tuple(tuple(shape) for shape in merged["shapes"]),
            flush_l2=o.flush_l2,
            trace_dir=trace_dir(o),
            trace_side="base" if o.orders.side == "A" else "head",
            batch=batch,
            compile_cache=self._compile_cache(),
            record_sites=o.orders.sites,
        )

    def _compile_cache(self) -> CompileCache | None:
        """This item's place in the compile cache, and what this session does with it."""
        from perfguard.measure.compile_cache import CompileCache, use_for

        o = self._state.options
        use = use_for(
            o.compile_cache, saving=o.save, told=o.orders.compile_cache, root=self._state.root
        )
        if use is None:
            return None
        folder, mode, lock = use
        return CompileCache(folder, mode, lock, self.test, self.variant)

    def _reference(self, job: Job) -> Reference | None:
        """The eager reference outputs of this test's model, computed once for its variants
        (None when the model fails: measuring it gives that error its result). It is computed
        with the threads the variants are measured with: another thread count sums in another
        order, and eager would then fail its own "exact" drift check by the last bits."""
        from perfguard.measure.drift import compute_reference
        from perfguard.measure.fingerprint import fingerprint
        from perfguard.measure.isolation import torch_state
        from perfguard.measure.runner import resolve_device

        state, settings, references = self._state, job.settings, self._role.references
        try:
            where = resolve_device(settings.device)
            # the reference belongs to this test's model: same weights in another test, or
            # another setting of the same class, must not share it
            key = (
                f"{self.test}:{where}:{settings.threads}:{job.work.key()}:"
                f"{fingerprint(job.model, job.inputs, job.kwargs)}"
            )
            reference = references.get(key)
            if reference is None:
                state.progress("eager reference")
                with torch_state(settings.threads):
                    reference = compute_reference(
                        job.model, job.inputs, where, job.kwargs, job.work
                    )
                references[key] = reference
                while len(references) > REFERENCE_CACHE:
                    references.popitem(last=False)
            if state.environment is None:
                from perfguard.environment import collect_environment

                state.environment = collect_environment(where)
        except Exception:  # the model failed: measure_model turns that into an error result
            return None
        return reference

    def _count(self, job: Job) -> None:
        """Under callgrind: run the counted regions instead of measuring, then end the item."""
        from perfguard.measure.instructions import count_regions

        assert self._role.counting is not None
        modes, regions = self._role.counting
        try:
            count_regions(job, modes, regions)
        except Exception as exc:  # the parent reads this line from pytest's summary
            pytest.fail(f"{self.variant}: {type(exc).__name__}: {exc}", pytrace=False)
        pytest.skip("instructions counted under callgrind")


def _end_item(variant: str, result: VariantResult) -> None:
    """The item skips or fails as its result says."""
    if result.status == "skipped":
        pytest.skip(f"{variant}: {result.error}")
    if result.status == "error":
        pytest.fail(f"{variant}: {result.error}", pytrace=False)
    check = result.drift_check
    if check is not None and not check.passed:
        pytest.fail(
            f"{variant}: numerical drift beyond its tolerance class "
            f"{check.tolerance_class}: error {check.error:.3g} against the {check.reference} "
            f"reference, allowed {check.allowed:.3g} (set drift_tolerance in the marker to "
            "accept it)",
            pytrace=False,
        )
