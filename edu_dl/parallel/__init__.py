"""Data parallelism: one model on many devices, each with a slice of the batch.

- ``train_data_parallel`` / ``train_single``: ``torch.distributed`` workers (gloo on CPUs, NCCL on
  GPUs) with gradients averaged by hand (``dist.all_reduce``) or by ``DistributedDataParallel``,
  against one process with the whole batch;
- ``mirrored_strategy_demo``: TensorFlow's ``MirroredStrategy`` on logical CPU devices;
- ``run_workers``: the launcher (worker processes, loopback rendezvous, timeouts, clean-up);
- ``pitfalls``: the lecture's list of multi-device pitfalls with measured numbers;
  ``draw_data_parallel_step``: its diagram of one step (two workers, one all-reduce);
- beyond data parallelism: ``bytes_per_device`` (ZeRO / FSDP memory arithmetic),
  ``tensor_parallel_mlp`` (a Megatron-style column-then-row split on R processes) and
  ``measure_all_reduce`` / ``fit_alpha_beta`` / ``check_fit`` (the alpha-beta model of an
  all-reduce, and how well it follows the measurements).

Scripts that call these must guard their top level with ``if __name__ == "__main__":``, because
the workers' processes import the script.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from edu_dl.parallel.comm_model import (
        AllReduceTimes,
        AlphaBeta,
        FitCheck,
        check_fit,
        fit_alpha_beta,
        measure_all_reduce,
        ring_factor,
    )
    from edu_dl.parallel.launch import WorkerError, choose_backend, run_workers
    from edu_dl.parallel.mirrored import MirroredResult, mirrored_strategy_demo
    from edu_dl.parallel.problem import TwoLayerNet, TwoLayerProblem, make_problem
    from edu_dl.parallel.summary import draw_data_parallel_step, max_rel_diff, pitfalls
    from edu_dl.parallel.tensor_parallel import TensorParallelResult, tensor_parallel_mlp
    from edu_dl.parallel.torch_dp import MODES, ParallelResult, train_data_parallel, train_single
    from edu_dl.parallel.zero import ModelStates, bytes_per_device, communication_factor

# Loaded on first use, so `edu-dl --help` (which imports edu_dl.parallel.cli) never loads torch.
# No submodule may share a name with these: an imported submodule would shadow the name.
_WHERE = {
    "WorkerError": "launch",
    "choose_backend": "launch",
    "run_workers": "launch",
    "MirroredResult": "mirrored",
    "mirrored_strategy_demo": "mirrored",
    "draw_data_parallel_step": "summary",
    "max_rel_diff": "summary",
    "pitfalls": "summary",
    "TwoLayerNet": "problem",
    "TwoLayerProblem": "problem",
    "make_problem": "problem",
    "MODES": "torch_dp",
    "ParallelResult": "torch_dp",
    "train_data_parallel": "torch_dp",
    "train_single": "torch_dp",
    "AllReduceTimes": "comm_model",
    "AlphaBeta": "comm_model",
    "FitCheck": "comm_model",
    "check_fit": "comm_model",
    "fit_alpha_beta": "comm_model",
    "measure_all_reduce": "comm_model",
    "ring_factor": "comm_model",
    "TensorParallelResult": "tensor_parallel",
    "tensor_parallel_mlp": "tensor_parallel",
    "ModelStates": "zero",
    "bytes_per_device": "zero",
    "communication_factor": "zero",
}
__all__ = [
    "MODES",
    "AllReduceTimes",
    "AlphaBeta",
    "FitCheck",
    "MirroredResult",
    "ModelStates",
    "ParallelResult",
    "TensorParallelResult",
    "TwoLayerNet",
    "TwoLayerProblem",
    "WorkerError",
    "bytes_per_device",
    "check_fit",
    "choose_backend",
    "communication_factor",
    "draw_data_parallel_step",
    "fit_alpha_beta",
    "make_problem",
    "max_rel_diff",
    "measure_all_reduce",
    "mirrored_strategy_demo",
    "pitfalls",
    "ring_factor",
    "run_workers",
    "tensor_parallel_mlp",
    "train_data_parallel",
    "train_single",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
