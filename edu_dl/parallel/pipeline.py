"""Pipeline parallelism and fully sharded data parallelism, run for real on gloo CPU processes.

- ``run_pipeline_and_fsdp``: ONE launch of R = 2 processes (``run_workers``) that runs
  ``torch.distributed.pipelining``'s GPipe and 1F1B schedules on a model cut into R stages (one
  per process), recording each stage's forward and backward of every micro-batch (start and end
  on the machine's monotonic clock) and the bytes of activations autograd keeps alive; then trains
  a small MLP with FSDP2 (``fully_shard``) and Adam, each rank on half the batch, recording each
  rank's shard of every parameter and its optimizer state.
- ``reference_pipeline`` / ``reference_fsdp``: the same computations in one process (the whole
  model, the whole batch), to check the distributed runs against.
- ``saved_activation_bytes``: the peak bytes autograd keeps for backward while a function runs
  (``torch.autograd.graph.saved_tensors_hooks``); ``step_memory``: the peak bytes of every tensor
  a function creates (a ``TorchDispatchMode``), which also sees what activation checkpointing
  recomputes inside its own hooks.

The stage's forward and backward are timed by two identity autograd functions at its ends (a
forward records when its input arrives and its output leaves; backward does the same in reverse),
so the timeline is the computation only, not the send and receive around it.
"""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from edu_dl.parallel.launch import run_workers

SCHEDULES = ("GPipe", "1F1B")


@dataclass(frozen=True)
class PipelineConfig:
    """The pipelined model: ``layers_per_stage`` Linear+ReLU layers of ``width`` per stage."""

    width: int = 512
    layers_per_stage: int = 4
    batch: int = 512
    microbatches: int = 8
    steps: int = 2  # the last step's timeline is kept (the first also infers the stage shapes)
    seed: int = 0


@dataclass(frozen=True)
class FSDPConfig:
    """The FSDP2 model: an MLP d_in -> hidden -> hidden -> d_out, Adam, ``steps`` steps."""

    d_in: int = 64
    hidden: int = 128
    d_out: int = 5  # 5 rows of the last layer: not an even split over 2 ranks
    batch: int = 64
    steps: int = 5
    lr: float = 1e-2
    seed: int = 0


@dataclass
class StageRun:
    """One stage's record of one training step under one schedule."""

    events: list[tuple[str, int, float, float]]  # (F or B, micro-batch, start s, end s), in order
    peak_activation_bytes: int  # the most bytes autograd kept for backward at once
    activation_bytes_per_microbatch: int  # what one micro-batch's forward keeps
    grads: list[np.ndarray]  # this stage's parameter gradients after the step
    loss: float | None  # the mean loss over micro-batches (the last stage only)


@dataclass
class FSDPRank:
    """One rank's view of the FSDP2 run."""

    losses: list[float]  # the full-batch loss before each step (averaged over ranks)
    weights: list[np.ndarray]  # every parameter after the run, all-gathered (full_tensor)
    shapes: list[tuple[int, ...]]  # each parameter's full shape
    local_rows: list[tuple[int, int]]  # (first row, rows) of each parameter this rank holds
    parameter_bytes: int  # the bytes of this rank's shards of the parameters
    gradient_bytes: int  # of its shards of the gradients
    optimizer_bytes: int  # of its Adam state (exp_avg, exp_avg_sq; the step counters not counted)
    full_parameter_bytes: int  # what one process without sharding holds of the parameters


@dataclass
class PipelineFSDPResult:
    """What the two-process run gives back."""

    stages: dict[str, list[StageRun]]  # schedule name -> one record per stage
    fsdp: list[FSDPRank]
    world_size: int
    wall_seconds: float  # with process start-up
    pids: list[int] = field(default_factory=list)


class _Stamp(torch.autograd.Function):
    """The identity, recording the time its forward and its backward run."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, log: list[tuple[str, float]], forward_tag: str,
                backward_tag: str) -> torch.Tensor:
        ctx.log, ctx.tag = log, backward_tag
        log.append((forward_tag, time.perf_counter()))
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        ctx.log.append((ctx.tag, time.perf_counter()))
        return grad, None, None, None


class TimedStage(torch.nn.Module):
    """``layers`` Linear+ReLU of ``width``; its ends stamp forward and backward."""

    def __init__(self, width: int, layers: int, generator: torch.Generator) -> None:
        super().__init__()
        linears = [torch.nn.Linear(width, width) for _ in range(layers)]
        self.layers = torch.nn.ModuleList(linears)
        for layer in linears:
            torch.nn.init.normal_(layer.weight, std=(2.0 / width) ** 0.5, generator=generator)
            torch.nn.init.zeros_(layer.bias)
        self.log: list[tuple[str, float]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not x.requires_grad:  # the first stage's input: make its backward stamp fire
            x = x.detach().requires_grad_(True)
        x = _Stamp.apply(x, self.log, "F+", "B-")  # forward opens here, backward closes
        for layer in self.layers:
            x = torch.relu(layer(x))
        return _Stamp.apply(x, self.log, "F-", "B+")  # forward closes, backward opens


def _stages(config: PipelineConfig, n_stages: int) -> list[TimedStage]:
    generator = torch.Generator().manual_seed(config.seed)
    return [TimedStage(config.width, config.layers_per_stage, generator) for _ in range(n_stages)]


def _data(config: PipelineConfig) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(config.seed + 1)
    x = torch.randn(config.batch, config.width, generator=generator)
    return x, torch.randn(config.batch, config.width, generator=generator)


def _mse(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return ((output - target) ** 2).mean()


class _LiveSaved:
    """Counts the bytes of tensors autograd saves for backward while they are alive."""

    def __init__(self, exclude: Any = ()) -> None:
        self.live = 0
        self.peak = 0
        # (address, bytes) of a saved tensor -> its holders: a tensor saved twice counts once
        self._seen: dict[tuple[int, int], int] = {}
        self._exclude = {p.data_ptr() for p in exclude}  # the parameters

    def pack(self, t: torch.Tensor) -> Any:
        key = (t.data_ptr(), t.nbytes)
        if t.data_ptr() in self._exclude:
            return _Holder(t)
        if self._seen.get(key, 0) == 0:
            self.live += t.nbytes
            self.peak = max(self.peak, self.live)
        self._seen[key] = self._seen.get(key, 0) + 1
        holder = _Holder(t)
        weakref.finalize(holder, self._release, key)
        return holder

    def _release(self, key: tuple[int, int]) -> None:
        self._seen[key] -= 1
        if self._seen[key] == 0:
            del self._seen[key]
            self.live -= key[1]

    @staticmethod
    def unpack(holder: Any) -> torch.Tensor:
        return holder.tensor

    def hooks(self) -> Any:
        return torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)


class _Holder:
    __slots__ = ("__weakref__", "tensor")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor


def saved_activation_bytes(fn: Callable[[], Any], parameters: Any = ()) -> int:
    """The peak bytes of tensors autograd keeps for backward while ``fn()`` runs (its forward and
    its backward), not counting ``parameters`` (the weights a layer saves are not activations)."""
    counter = _LiveSaved(parameters)
    with counter.hooks():
        fn()
    return counter.peak


class _LiveTensors(TorchDispatchMode):
    """Counts the bytes of the tensors every operator creates while they stay alive."""

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._holders: dict[tuple[int, int], int] = {}  # (storage address, bytes) -> tensors

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or t.untyped_storage().data_ptr() == 0:
                continue
            key = (t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
            if key not in self._holders:
                self._holders[key] = 0
                self.live += key[1]
                self.peak = max(self.peak, self.live)
            self._holders[key] += 1
            weakref.finalize(t, self._release, key)
        return out

    def _release(self, key: tuple[int, int]) -> None:
        self._holders[key] -= 1
        if self._holders[key] == 0:
            del self._holders[key]
            self.live -= key[1]


def step_memory(fn: Callable[[], Any]) -> tuple[int, int]:
    """(peak, kept): the most bytes of tensors created by ``fn()`` alive at once while it runs,
    and the bytes of those still alive when it returns (a training step's new gradients). The
    tensors alive before it (weights, data) are not counted. Every operator's output is seen
    (``TorchDispatchMode``), so activations, recomputed activations and temporaries all count."""
    counter = _LiveTensors()
    with counter:
        fn()
    return counter.peak, counter.live


def _events(log: list[tuple[str, float]]) -> list[tuple[str, int, float, float]]:
    """Pair the stamps into (F or B, micro-batch, start, end). Forwards and backwards each run in
    micro-batch order under both schedules, so the k-th of each kind is micro-batch k."""
    out: list[tuple[str, int, float, float]] = []
    counts = {"F": 0, "B": 0}
    open_at: dict[str, float] = {}
    for tag, t in log:
        kind = tag[0]
        if tag[1] == "+":
            open_at[kind] = t
        else:
            out.append((kind, counts[kind], open_at.pop(kind), t))
            counts[kind] += 1
    return out


def _pipeline(rank: int, world_size: int, device: torch.device, config: PipelineConfig,
              schedule_name: str) -> StageRun:
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    stage_module = _stages(config, world_size)[rank].to(device)
    x, y = _data(config)
    stage = PipelineStage(stage_module, rank, world_size, device)
    kind = {"GPipe": ScheduleGPipe, "1F1B": Schedule1F1B}[schedule_name]
    schedule = kind(stage, n_microbatches=config.microbatches, loss_fn=_mse)
    last = rank == world_size - 1
    for _ in range(config.steps):
        stage_module.zero_grad()
        stage_module.log.clear()
        counter = _LiveSaved(stage_module.parameters())
        losses: list[torch.Tensor] = []
        dist.barrier()
        with counter.hooks():
            if rank == 0:
                schedule.step(x)
            elif last:
                schedule.step(target=y, losses=losses)
            else:
                schedule.step()
    # One micro-batch's saved bytes, alone: its forward with the same hooks, outside the pipeline.
    events = _events(stage_module.log)
    alone = _LiveSaved(stage_module.parameters())
    rows = config.batch // config.microbatches
    with alone.hooks():
        out = stage_module(x[:rows])
        if last:  # the last stage keeps what its loss saves too
            out = _mse(out, y[:rows])
    del out
    return StageRun(
        events=events,
        peak_activation_bytes=counter.peak,
        activation_bytes_per_microbatch=alone.peak,
        grads=[p.grad.detach().cpu().numpy().copy() for p in stage_module.parameters()
               if p.grad is not None],
        loss=float(torch.stack(losses).detach().mean()) if last and losses else None,
    )


def reference_pipeline(config: PipelineConfig, n_stages: int) -> tuple[float, list[np.ndarray]]:
    """The pipelined model in one process on the whole batch: (loss, every stage's gradients in
    stage order). The pipeline scales each micro-batch's loss by 1/m, so its gradients are these."""
    stages = _stages(config, n_stages)
    x, y = _data(config)
    out = x
    for stage in stages:
        out = stage(out)
    loss = _mse(out, y)
    loss.backward()
    grads = [p.grad.detach().numpy().copy() for s in stages for p in s.parameters()
             if p.grad is not None]
    return float(loss.detach()), grads


# --------------------------------------------------------------------------- FSDP2


def _mlp(config: FSDPConfig) -> torch.nn.Sequential:
    torch.manual_seed(config.seed)
    return torch.nn.Sequential(
        torch.nn.Linear(config.d_in, config.hidden), torch.nn.ReLU(),
        torch.nn.Linear(config.hidden, config.hidden), torch.nn.ReLU(),
        torch.nn.Linear(config.hidden, config.d_out))


def _fsdp_data(config: FSDPConfig) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(config.seed + 1)
    return (torch.randn(config.batch, config.d_in, generator=generator),
            torch.randn(config.batch, config.d_out, generator=generator))


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _fsdp(rank: int, world_size: int, device: torch.device, config: FSDPConfig) -> FSDPRank:
    from torch.distributed.fsdp import fully_shard

    model = _mlp(config).to(device)
    full_bytes = sum(_nbytes(p) for p in model.parameters())
    shapes = [tuple(p.shape) for p in model.parameters()]
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    x, y = _fsdp_data(config)
    rows = config.batch // world_size
    x, y = x[rank * rows:(rank + 1) * rows], y[rank * rows:(rank + 1) * rows]
    losses = []
    for _ in range(config.steps):
        optimizer.zero_grad()
        loss = _mse(model(x), y)  # the mean over this rank's rows; FSDP averages the gradients
        loss.backward()
        optimizer.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        losses.append(float(total) / world_size)
    local = [p.to_local() for p in model.parameters()]  # type: ignore[attr-defined]
    grads = [p.grad.to_local() for p in model.parameters()  # type: ignore[attr-defined]
             if p.grad is not None]
    state = [t.to_local() if hasattr(t, "to_local") else t
             for s in optimizer.state.values() for k, t in s.items() if k != "step"]
    starts = []
    for p, shard in zip(model.parameters(), local):
        rows_each = -(-p.shape[0] // world_size)
        starts.append((min(rank * rows_each, p.shape[0]), int(shard.shape[0])))
    weights = [p.full_tensor().detach().cpu().numpy().copy()  # type: ignore[attr-defined]
               for p in model.parameters()]
    return FSDPRank(
        losses=losses, weights=weights, shapes=shapes, local_rows=starts,
        parameter_bytes=sum(_nbytes(t) for t in local),
        gradient_bytes=sum(_nbytes(t) for t in grads),
        optimizer_bytes=sum(_nbytes(t) for t in state),
        full_parameter_bytes=full_bytes,
    )


def reference_fsdp(config: FSDPConfig) -> tuple[list[float], list[np.ndarray]]:
    """The FSDP run's model in one process on the whole batch: (losses, final weights)."""
    model = _mlp(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    x, y = _fsdp_data(config)
    losses = []
    for _ in range(config.steps):
        optimizer.zero_grad()
        loss = _mse(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses, [p.detach().numpy().copy() for p in model.parameters()]


# --------------------------------------------------------------------------- the launch


def _worker(rank: int, world_size: int, device: torch.device, pipe: PipelineConfig,
            fsdp: FSDPConfig) -> dict[str, Any]:
    torch.manual_seed(0)
    stages = {name: _pipeline(rank, world_size, device, pipe, name) for name in SCHEDULES}
    return {"stages": stages, "fsdp": _fsdp(rank, world_size, device, fsdp), "pid": os.getpid()}


def run_pipeline_and_fsdp(
    pipe: PipelineConfig | None = None,
    fsdp: FSDPConfig | None = None,
    *,
    world_size: int = 2,
    timeout_s: float = 120.0,
) -> PipelineFSDPResult:
    """GPipe, 1F1B and FSDP2 on ``world_size`` gloo CPU processes, in one launch."""
    pipe = pipe if pipe is not None else PipelineConfig()
    fsdp = fsdp if fsdp is not None else FSDPConfig()
    if pipe.batch % pipe.microbatches or fsdp.batch % world_size:
        raise ValueError("the batch must split evenly into micro-batches and over the ranks")
    if pipe.steps < 2:
        raise ValueError("the pipeline needs 2 steps or more: its first step also runs a forward "
                         "to infer the shapes each stage sends, which the timeline must not show")
    start = time.perf_counter()
    results = run_workers(_worker, world_size, args=(pipe, fsdp), backend="gloo",
                          timeout_s=timeout_s)
    return PipelineFSDPResult(
        stages={name: [r["stages"][name] for r in results] for name in SCHEDULES},
        fsdp=[r["fsdp"] for r in results],
        world_size=world_size,
        wall_seconds=time.perf_counter() - start,
        pids=[r["pid"] for r in results],
    )
