"""What one training step keeps in GPU memory, computed without a GPU.

A step holds four things (and the allocator's and libraries' overheads, which no formula gives):

- the parameters, ``P`` values of the dtype's size;
- their gradients, as many again;
- the optimizer's state: nothing for plain SGD, one buffer per parameter for SGD with momentum,
  two for Adam (``exp_avg`` and ``exp_avg_sq``; its step counters, one number per tensor, are
  ignored);
- the activations autograd saves in the forward pass for the backward pass, which grow with the
  batch size. They are counted with ``torch.autograd.graph.saved_tensors_hooks`` during one
  forward pass on the model's own device: on PyTorch's ``meta`` device this costs no memory, so
  VGG-16 at batch 256 can be budgeted on a laptop.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import torch
from torch import nn

from edu_dl.backend import gpu_status
from edu_dl.util.units import format_bytes

T = TypeVar("T")

# Buffers of the parameters' size that each optimizer keeps between steps.
OPTIMIZER_BUFFERS = {"sgd": 0, "sgd_momentum": 1, "adam": 2}


@dataclass(frozen=True)
class Budget:
    """Bytes one training step keeps: parameters, gradients, optimizer state, activations."""

    batch_size: int
    dtype: str
    optimizer: str
    params: int
    grads: int
    optimizer_state: int
    activations: int

    @property
    def total(self) -> int:
        return self.params + self.grads + self.optimizer_state + self.activations

    def parts(self) -> dict[str, int]:
        """The four components by name, in bytes."""
        return {"parameters": self.params, "gradients": self.grads,
                "optimizer state": self.optimizer_state, "activations": self.activations}


def itemsize(dtype: torch.dtype) -> int:
    """Bytes per value: 4 for float32, 2 for float16 and bfloat16, 8 for float64."""
    return torch.empty((), dtype=dtype).element_size()


def parameter_bytes(model: nn.Module, dtype: torch.dtype | None = None) -> int:
    """sum over trainable parameters of numel * itemsize (of ``dtype`` if given)."""
    return sum(p.numel() * (itemsize(dtype) if dtype is not None else p.element_size())
               for p in model.parameters() if p.requires_grad)


def optimizer_state_bytes(model: nn.Module, optimizer: str = "adam",
                          dtype: torch.dtype | None = None) -> int:
    """buffers * parameter bytes: 0 for 'sgd', 1 for 'sgd_momentum', 2 for 'adam'."""
    if optimizer not in OPTIMIZER_BUFFERS:
        raise ValueError(f"unknown optimizer {optimizer!r}: choose from "
                         f"{', '.join(OPTIMIZER_BUFFERS)}")
    return OPTIMIZER_BUFFERS[optimizer] * parameter_bytes(model, dtype)


def _storage_key(t: torch.Tensor) -> tuple[str, int]:
    """One key per storage (views share it): the device and the storage's address in C++."""
    return str(t.device), t.untyped_storage()._cdata


@dataclass(frozen=True)
class Saved:
    """One storage autograd saved for backward: its first tensor's shape and dtype, its bytes."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    nbytes: int


def saved_activations(model: nn.Module, input_shape: tuple[int, ...], batch_size: int,
                      dtype: torch.dtype | None = None) -> list[Saved]:
    """The storages autograd saves during one training-mode forward pass of a batch, in order.

    Runs on the model's own device (``meta``: no memory used). Parameters and buffers (weights,
    batch-norm statistics) are left out: they are there whatever the batch. A storage saved
    twice (ReLU's output is also the next layer's input) counts once. The input batch counts
    when the first layer saves it, as it does for its weight's gradient.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    first = next(model.parameters())
    if dtype is not None and dtype != first.dtype:
        if first.device.type != "meta":
            raise ValueError("converting a model's dtype copies it: pass a meta-device model, "
                             "or convert it yourself")
        model = copy.deepcopy(model).to(dtype)
        first = next(model.parameters())
    fixed = {_storage_key(t) for t in [*model.parameters(), *model.buffers()]}
    saved: dict[tuple[str, int], Saved] = {}
    keep: list[torch.Tensor] = []  # alive until counted: a freed address could be reused

    def pack(t: torch.Tensor) -> torch.Tensor:
        key = _storage_key(t)
        if key not in fixed and key not in saved:
            saved[key] = Saved(tuple(t.shape), t.dtype, t.untyped_storage().nbytes())
            keep.append(t)
        return t

    was_training = model.training
    model.train()
    try:
        x = torch.empty(batch_size, *input_shape, device=first.device, dtype=first.dtype)
        if first.device.type != "meta":
            x.normal_()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = model(x)
        del out
    finally:
        model.train(was_training)
    return list(saved.values())


def activation_bytes(model: nn.Module, input_shape: tuple[int, ...], batch_size: int,
                     dtype: torch.dtype | None = None) -> int:
    """Bytes autograd saves for backward in one forward pass (see saved_activations)."""
    return sum(s.nbytes for s in saved_activations(model, input_shape, batch_size, dtype))


def budget(model: nn.Module, input_shape: tuple[int, ...], batch_size: int,
           optimizer: str = "adam", dtype: torch.dtype = torch.float32) -> Budget:
    """A training step's memory, everything in ``dtype``: params + grads + state + activations."""
    params = parameter_bytes(model, dtype)
    return Budget(batch_size=batch_size, dtype=str(dtype).removeprefix("torch."),
                  optimizer=optimizer, params=params, grads=params,
                  optimizer_state=optimizer_state_bytes(model, optimizer, dtype),
                  activations=activation_bytes(model, input_shape, batch_size, dtype))


def max_batch(model: nn.Module, input_shape: tuple[int, ...], budget_bytes: float,
              optimizer: str = "adam", dtype: torch.dtype = torch.float32,
              limit: int = 1 << 20) -> int:
    """The largest batch size (at most ``limit``) whose budget().total fits in ``budget_bytes``;
    0 when not even one example fits.

    A step's bytes grow with the batch by the same amount per example wherever every saved
    activation is a batch of per-example tensors (an affine total: fixed + b * per example), so
    the answer is first solved from batches 1 and 2 and checked at it and one past it: four
    forward passes on the meta device. Where the total is not affine the check fails and the
    search doubles until a batch does not fit, then bisects (about 2 log2(answer) passes)."""
    def total(b: int) -> int:
        return budget(model, input_shape, b, optimizer, dtype).total

    one = total(1)
    if one > budget_bytes:
        return 0
    if limit == 1:
        return 1
    per_example = total(2) - one
    if per_example > 0:
        guess = min(limit, 1 + int((budget_bytes - one) // per_example))
        if total(guess) <= budget_bytes and (guess == limit or total(guess + 1) > budget_bytes):
            return guess
    good = 1  # not affine (or nothing grew from 1 to 2): search
    while good < limit and total(min(2 * good, limit)) <= budget_bytes:
        good = min(2 * good, limit)
    if good == limit:
        return limit
    bad = min(2 * good, limit)
    while bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if total(mid) <= budget_bytes else (good, mid)
    return good


def fit_batch(step: Callable[[int], T], batch_size: int, min_batch: int = 1,
              log: Callable[[str], None] | None = print) -> tuple[int, T]:
    """Run ``step(batch_size)``; on an out-of-memory error halve the batch and try again.

    Returns (the batch size that ran, its result). Raises the last error below ``min_batch``.
    After an out-of-memory error PyTorch's caching allocator still holds the blocks it had
    reserved; ``torch.cuda.empty_cache()`` hands them back before the retry.
    """
    while True:
        try:
            return batch_size, step(batch_size)
        except torch.OutOfMemoryError as exc:
            if batch_size // 2 < min_batch:
                raise
            if log is not None:
                log(f"batch {batch_size}: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}"
                    f"; retrying with {batch_size // 2}")
            if gpu_status("torch")[0]:
                torch.cuda.empty_cache()
            batch_size //= 2


def simulated_step(model: nn.Module, input_shape: tuple[int, ...], capacity_bytes: float,
                   optimizer: str = "adam", dtype: torch.dtype = torch.float32
                   ) -> Callable[[int], Budget]:
    """A stand-in for a training step on a GPU of ``capacity_bytes``: it raises
    torch.OutOfMemoryError, as CUDA would, when budget().total does not fit; else the Budget."""
    def step(batch_size: int) -> Budget:
        need = budget(model, input_shape, batch_size, optimizer, dtype)
        if need.total > capacity_bytes:
            raise torch.OutOfMemoryError(
                f"(simulated) a step at batch {batch_size} needs {format_bytes(need.total)}; "
                f"the GPU holds {format_bytes(capacity_bytes)}")
        return need

    return step
