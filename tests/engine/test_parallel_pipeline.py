"""Pipeline parallelism and FSDP2 on two gloo processes (one launch, small models), and the
memory counters lecture 21 uses: the distributed runs equal one process, the recorded orders are
GPipe's and 1F1B's, the activation counts follow the schedules, and checkpointing needs less."""

from __future__ import annotations

import numpy as np
import pytest
from fixtures.frameworks import lazy

pipeline = lazy("edu_dl.parallel.pipeline")  # it imports torch


def test_pipeline_and_fsdp_on_two_processes_equal_one_process() -> None:
    pipe = pipeline.PipelineConfig(width=16, layers_per_stage=1, batch=16, microbatches=4,
                                   steps=2)
    fsdp = pipeline.FSDPConfig(d_in=8, hidden=6, d_out=3, batch=8, steps=3)
    run = pipeline.run_pipeline_and_fsdp(pipe, fsdp, world_size=2)
    assert len(set(run.pids)) == 2
    orders = {name: [[(k, i + 1) for k, i, _, _ in stage.events] for stage in stages]
              for name, stages in run.stages.items()}
    forwards, backwards = [("F", i) for i in range(1, 5)], [("B", i) for i in range(1, 5)]
    assert orders["GPipe"] == [forwards + backwards] * 2
    assert orders["1F1B"][1] == [step for i in range(1, 5) for step in (("F", i), ("B", i))]
    assert orders["1F1B"][0] == [("F", 1), ("F", 2), ("B", 1), ("F", 3), ("B", 2), ("F", 4),
                                 ("B", 3), ("B", 4)]
    loss, grads = pipeline.reference_pipeline(pipe, 2)
    for name, stages in run.stages.items():
        assert stages[-1].loss == pytest.approx(loss, rel=1e-5)
        piped = [g for stage in stages for g in stage.grads]
        assert len(piped) == len(grads)
        assert all(np.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(piped, grads))
        held = [s.peak_activation_bytes / s.activation_bytes_per_microbatch for s in stages]
        assert held == ([4.0, 4.0] if name == "GPipe" else [2.0, 1.0])
    losses, weights = pipeline.reference_fsdp(fsdp)
    for rank in run.fsdp:
        assert rank.losses == pytest.approx(losses, rel=1e-5)
        assert all(np.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(rank.weights, weights))
    # 6 rows split 3 + 3, the last layer's 3 rows 2 + 1 (torch.chunk's sizes)
    assert [r.local_rows[-1] for r in run.fsdp] == [(0, 2), (2, 1)]
    total = sum(r.parameter_bytes for r in run.fsdp)
    assert total == run.fsdp[0].full_parameter_bytes
    assert all(r.optimizer_bytes == 2 * r.parameter_bytes == 2 * r.gradient_bytes
               for r in run.fsdp)


def test_step_memory_sees_what_checkpointing_saves() -> None:
    torch = pytest.importorskip("torch")
    from torch.utils.checkpoint import checkpoint_sequential

    torch.manual_seed(0)
    deep = torch.nn.Sequential(*[layer for _ in range(8)
                                 for layer in (torch.nn.Linear(64, 64), torch.nn.ReLU())])
    x = torch.randn(32, 64)

    def plain() -> None:
        deep.zero_grad()
        deep(x).sum().backward()

    def checkpointed() -> None:
        deep.zero_grad()
        checkpoint_sequential(deep, 4, x, use_reentrant=False).sum().backward()

    (peak, kept), (peak_ck, kept_ck) = (pipeline.step_memory(f) for f in (plain, checkpointed))
    grads = sum(p.numel() * 4 for p in deep.parameters())
    assert kept == kept_ck == grads
    assert peak_ck - kept_ck < (peak - kept) / 2
    assert pipeline.saved_activation_bytes(plain, deep.parameters()) > 0
