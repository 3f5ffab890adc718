"""A training step as a workload: zero_grad, forward, `loss_fn(output)`, backward, optimizer
step, built per variant like a forward call.

Every variant trains its own copy of the model, with a fresh optimizer from the user's
factory, and starts from the same weights and the same random numbers (a seeded generator,
forked so that the user's own stays as it was). What the drift check reads is the first step
from that state: the loss and every gradient, which depend on the weights and the inputs, not
on the optimizer. So the references need no optimizer, and a variant's first step is taken
again after its timing, from the saved state, with its own (compiled) step.

Choices, said where they are made:
- `compile-*` compiles the module (`torch.compile(model)`): the forward and, through
  AOTAutograd, the backward. The optimizer step stays eager, as the user's optimizer was
  built (its foreach or fused kernels): compiling it too would time a step the user does not
  run unless they wrote it so, and would add a compile per optimizer.
- compiled steps draw random numbers as eager does (inductor's `fallback_random`), so that
  dropout draws the same masks under every variant and the gradients can be judged against
  eager's; the cost is in the timing (the random ops run as ATen kernels, unfused).
- `amp-fp16` scales the loss with a `torch.amp.GradScaler`, as fp16 training must; `amp-bf16`
  needs none.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from perfguard.errors import PerfguardError
from perfguard.variants.base import Built, compiled_or_eager, model_size_bytes
from perfguard.variants.spec import VariantSpec
from perfguard.variants.workload import Autocast, Building, Workload

SEED = 20_240_917  # the random state every variant's step starts from
TRAINABLE_FAMILIES = ("compile", "amp")
"""Variant families a training step runs under (with eager); the others are inference-only."""


class TrainStepError(PerfguardError, ValueError):
    """The training step cannot be taken as given: its message says what to change."""


@dataclass(frozen=True)
class TrainStep(Workload):
    """What turns a forward call into a training step: `loss_fn(output)` gives the scalar
    loss (targets closed over), `optimizer(params)` a fresh optimizer."""

    name: ClassVar[str] = "train"
    copies_model: ClassVar[bool] = True

    loss_fn: Callable[[Any], Any]
    optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer]

    def refuses(self, spec: VariantSpec) -> str | None:
        return inference_only(spec)

    def random(self, device: torch.device) -> contextlib.AbstractContextManager[None]:
        # a training step draws random numbers (dropout) in every timed step: each variant
        # starts from the same seed, and the caller's generator is left as it was
        return seeded(device)

    def error(self, message: str) -> str:
        return training_error(message)

    def workspace(
        self, model: nn.Module, device: torch.device
    ) -> contextlib.AbstractContextManager[nn.Module]:
        # a copy of its own, in training mode: the step changes the weights
        return contextlib.nullcontext(copy.deepcopy(model).to(device).train())

    def drift_view(
        self,
        work: nn.Module,
        args: Sequence[Any],
        named: Mapping[str, Any],
        device: torch.device,
        autocast: Autocast,
        tokens: Any,
    ) -> Any:
        return first_gradients(work, args, named, self, device, autocast)

    def build(self, building: Building) -> Built:
        b = building
        return build_training(
            b.model,
            b.inputs,
            b.named,
            b.device,
            self,
            autocast=b.autocast,
            autocast_dtype=b.autocast_dtype,
            compiler=b.compiler,
            tolerance_class=b.tolerance_class,
        )


@contextlib.contextmanager
def seeded(device: torch.device) -> Iterator[None]:
    """The same random numbers for every variant, the caller's generators left as they were."""
    devices = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(SEED)
        yield


def inference_only(spec: VariantSpec) -> str | None:
    """Why `spec` cannot take a training step, or None when it can."""
    for part in spec.parts:
        if part.family not in ("eager", *TRAINABLE_FAMILIES):
            return (
                f"{part.name} is an inference-only variant: a training step is measured under "
                "eager, compile-* and amp-* (and their combinations)"
            )
    return None


def trainable(model: nn.Module) -> list[nn.Parameter]:
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise TrainStepError(
            "train_step: the model has no trainable parameters (requires_grad is False on "
            "every one): there is nothing to train; measure it with perfguard.run instead"
        )
    return params


def scalar_loss(loss: Any) -> torch.Tensor:
    """`loss`, checked: a tensor of one floating value that backward can start from."""
    if not isinstance(loss, torch.Tensor):
        raise TrainStepError(
            f"train_step: loss_fn must return a scalar tensor; it returned a {type(loss).__name__}"
        )
    if loss.numel() != 1 or not loss.is_floating_point():
        raise TrainStepError(
            f"train_step: loss_fn must return a scalar floating tensor; it returned shape "
            f"{tuple(loss.shape)} of {loss.dtype} (reduce it, e.g. loss.mean())"
        )
    if not loss.requires_grad:
        raise TrainStepError(
            "train_step: the loss does not depend on any trainable parameter (it has no "
            "grad_fn): loss_fn must compute it from the model's output"
        )
    return loss


def make_optimizer(step: TrainStep, params: list[nn.Parameter]) -> torch.optim.Optimizer:
    try:
        optimizer = step.optimizer(params)
    except Exception as exc:
        raise TrainStepError(
            f"train_step: the optimizer factory raised {type(exc).__name__}: {exc} (it is "
            "called with the list of trainable parameters, e.g. "
            "lambda params: torch.optim.AdamW(params))"
        ) from exc
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TrainStepError(
            f"train_step: the optimizer factory returned a {type(optimizer).__name__}, not a "
            "torch.optim.Optimizer (pass a factory: lambda params: torch.optim.AdamW(params))"
        )
    return optimizer


def first_gradients(
    model: nn.Module,
    inputs: Sequence[Any],
    named: Mapping[str, Any],
    step: TrainStep,
    device: torch.device,
    autocast: Callable[[], contextlib.AbstractContextManager[object]] = contextlib.nullcontext,
) -> list[torch.Tensor]:
    """The loss and every gradient of one forward and backward of `model` (already on
    `device`, in the dtype wanted) from the seeded state: what a step's drift is judged on."""
    params = trainable(model)
    model.zero_grad(set_to_none=True)
    with seeded(device):
        with autocast():
            loss = scalar_loss(step.loss_fn(model(*inputs, **named)))
        loss.backward()
    return [loss.detach(), *(_grad(p) for p in params)]


def _grad(p: nn.Parameter) -> torch.Tensor:
    # a parameter the loss does not reach has no gradient: zeros, as the optimizer sees it
    return p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)


def build_training(
    model: nn.Module,
    inputs: tuple[Any, ...],
    named: dict[str, Any],
    device: torch.device,
    step: TrainStep,
    autocast: Callable[[], contextlib.AbstractContextManager[object]],
    autocast_dtype: torch.dtype | None,
    compiler: Callable[[nn.Module], Callable[..., Any]] | None,
    tolerance_class: str,
) -> Built:
    """One training step of a copy of `model` under autocast and `compiler` (a variant the
    registry found trainable: `inference_only`), its call `step()`; its outputs for the
    drift check are the loss and gradients of a first step from the saved state."""
    work = copy.deepcopy(model).to(device).train()
    params = trainable(work)
    optimizer = make_optimizer(step, params)
    scaler = torch.amp.GradScaler(device.type) if autocast_dtype == torch.float16 else None
    start = _State.save(work, optimizer, scaler)
    random = _fallback_random if compiler is not None else contextlib.nullcontext

    def make_call(compiled: bool = True) -> Callable[[], Any]:
        fn = compiled_or_eager(work, compiler, compiled)

        def train() -> Any:
            optimizer.zero_grad(set_to_none=True)
            with random():
                with autocast():
                    loss = scalar_loss(step.loss_fn(fn(*inputs, **named)))
                if scaler is None:
                    loss.backward()
                    optimizer.step()
                else:
                    scaler.scale(loss).backward()
                    scaler.unscale_(optimizer)
                    scaler.step(optimizer)
                    scaler.update()
            return loss

        return train

    def first_step(call: Callable[[], Any]) -> list[torch.Tensor]:
        start.restore(work, optimizer, scaler)
        with seeded(device):
            loss = call()
        return [loss.detach(), *(_grad(p) for p in params)]

    return Built(
        make_call=make_call,
        timing="device",
        tolerance_class=tolerance_class,
        compiled=compiler is not None,
        autocast_dtype=autocast_dtype,
        model_size_bytes=model_size_bytes(work),
        notes=[],
        details={},
        training=True,
        fetch_outputs=first_step,
        module=work,
        eager_call=make_call(compiled=False),
    )


@contextlib.contextmanager
def _fallback_random() -> Iterator[None]:
    import torch._inductor.config as inductor

    with inductor.patch(fallback_random=True):
        yield


@dataclass
class _State:
    """Weights, optimizer state and loss scale, kept to put a variant back where it began."""

    weights: dict[str, Any]
    optimizer: dict[str, Any]
    scaler: dict[str, Any] | None

    @classmethod
    def save(cls, model: nn.Module, optimizer: torch.optim.Optimizer, scaler: Any) -> _State:
        return cls(
            weights=copy.deepcopy(model.state_dict()),
            optimizer=copy.deepcopy(optimizer.state_dict()),
            scaler=None if scaler is None else copy.deepcopy(scaler.state_dict()),
        )

    def restore(self, model: nn.Module, optimizer: torch.optim.Optimizer, scaler: Any) -> None:
        # copied into the same tensors, so a compiled step keeps its guards and its graphs
        model.load_state_dict(self.weights)
        optimizer.load_state_dict(copy.deepcopy(self.optimizer))
        if scaler is not None and self.scaler is not None:
            scaler.load_state_dict(self.scaler)


def training_error(message: str) -> str:
    """A training step's own failure (`message`: its first line), with what to change where
    the failure is a known one."""
    hint = ""
    if "same device" in message:  # seen on CUDA: targets left on the CPU
        hint = (
            " (perfguard moves the model and its inputs to the run's device; tensors that "
            "loss_fn holds, its targets, stay where they are: `target.to(out.device)`)"
        )
    return f"train_step: {message}{hint}"
