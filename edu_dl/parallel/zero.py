"""ZeRO / FSDP memory arithmetic: the model states one device holds when they are sharded over R.

Mixed-precision training with Adam keeps, per parameter (the ZeRO paper, Rajbhandari et al. 2020):
2 bytes of float16 weights, 2 bytes of float16 gradients and K = 12 bytes of float32 optimizer
state (a master copy of the weights, Adam's momentum and variance, 4 bytes each): 16 bytes.
Plain data parallelism (stage 0) replicates all of it on every device. ZeRO shards it over the R
data-parallel devices: stage 1 the optimizer state, stage 2 the gradients as well, stage 3 (what
PyTorch calls FSDP's full sharding) the weights too. Activations, buffers and the temporary
all-gathered weights of stage 3 are not model states and are not counted here.
"""

from __future__ import annotations

from dataclasses import dataclass

STAGES = (0, 1, 2, 3)
STAGE_NAMES = {
    0: "DDP (nothing sharded)",
    1: "ZeRO-1 (optimizer state)",
    2: "ZeRO-2 (+ gradients)",
    3: "ZeRO-3 / FSDP (+ weights)",
}
# Bytes per parameter of mixed-precision Adam: float16 weights and gradients, and float32
# master weights, momentum and variance.
WEIGHT_BYTES, GRAD_BYTES, OPTIMIZER_BYTES = 2, 2, 4 + 4 + 4


@dataclass(frozen=True)
class ModelStates:
    """Bytes of model states held by ONE device."""

    weights: float
    grads: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer


def bytes_per_device(
    n_params: int,
    world_size: int,
    stage: int,
    *,
    weight_bytes: float = WEIGHT_BYTES,
    grad_bytes: float = GRAD_BYTES,
    optimizer_bytes: float = OPTIMIZER_BYTES,
) -> ModelStates:
    """The model states one of ``world_size`` devices holds under ZeRO ``stage`` (0 = DDP).

    A sharded state is split evenly (the real libraries pad the last shard; a few bytes).
    """
    if stage not in STAGES:
        raise ValueError(f"ZeRO stage must be one of {STAGES}, not {stage!r}")
    if world_size < 1 or n_params < 0:
        raise ValueError(f"need world_size >= 1 and n_params >= 0, got {world_size}, {n_params}")

    def share(per_param: float, sharded: bool) -> float:
        return n_params * per_param / (world_size if sharded else 1)

    return ModelStates(
        weights=share(weight_bytes, stage >= 3),
        grads=share(grad_bytes, stage >= 2),
        optimizer=share(optimizer_bytes, stage >= 1),
    )


def communication_factor(stage: int) -> float:
    """Bytes each device sends per step, in units of DDP's ring all-reduce of the gradients.

    Stages 1 and 2 replace the all-reduce by a reduce-scatter of the gradients and an all-gather
    of the updated weights: the same volume. Stage 3 all-gathers the weights twice (forward and
    backward) and reduce-scatters the gradients: 1.5x (the ZeRO paper, section 7).
    """
    if stage not in STAGES:
        raise ValueError(f"ZeRO stage must be one of {STAGES}, not {stage!r}")
    return 1.5 if stage == 3 else 1.0
