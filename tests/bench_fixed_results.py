"""Fixed results for every ``edu-dl bench`` benchmark, patched in place of its measurement.

``tests/test_bench_report.py`` runs each command on these results and compares its files byte
for byte with ``tests/bench_golden/``, which the writers before the one harness (issue 27)
wrote for the very same results. To write the golden files again from a checkout of that older
code: ``PYTHONPATH=<old checkout> python tests/bench_fixed_results.py tests/bench_golden``.
Only data classes that both the old and the new code define are used here.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from edu_dl.bench import conv, engine, kernels, loader, matmul, plan, transfer, twins
from edu_dl.bench.device import FAKE_GPU_ENV, Device

DATE = "2026-01-02 03:04 UTC"
MACHINE = ["- CPU: a fixed CPU, 2 usable cores (2 online)", "- OS: fixed"]
# Each benchmark's command line (after `edu-dl bench`), run on the fixed result.
COMMANDS: dict[str, list[str]] = {
    "engine": ["engine", "--frameworks", "numpy,eager,torch", "--sizes", "tiny,lecture",
               "--no-plan"],
    "plan": ["plan", "--quick"],
    "matmul": ["matmul", "--device", "cpu"],
    "loader": ["loader"],
    "transfer": ["transfer", "--device", "cpu"],
    "kernels": ["kernels", "--device", "gpu"],
    "conv": ["conv", "--quick"],
    "parallel": ["parallel", "--steps", "3", "--no-tf"],
    "twins": ["twins", "--model", "tiny", "--twins", "numpy,torch_nn,keras"],
}
DATA_FILES = (".md", ".csv", ".json")  # what readers read; PNG files are only looked at


def engine_result(*_: Any, **__: Any) -> engine.EngineResult:
    result = engine.EngineResult(["tiny", "lecture"], ["numpy", "eager", "torch"], 11, 3,
                                 date=DATE, load=(0.25, 0.5), threads=None, device=Device())
    seconds = {"numpy": 1.234e-5, "eager": 2.5e-5, "torch": 1.5e-4}
    for i, size in enumerate(result.sizes):
        for fw in result.frameworks:
            result.seconds[size, fw] = None if (size, fw) == ("lecture", "torch") else (
                seconds[fw] * (10 ** i))
            result.first_losses[size, fw] = 1.2345678 + i
    result.errors["torch"] = "it stopped"
    result.warnings.append("lecture: a first loss differs")
    return result


def plan_rows(*_: Any, **__: Any) -> list[plan.PlanRow]:
    return [plan.PlanRow("pruning: a cheap sum", 2.5e-4, 1.25e-6, "static fetching both: 3 ms"),
            plan.PlanRow("constant folding: x @ (A @ B)", 0.0123, 0.00051, "folded once")]


def matmul_result(*_: Any, **__: Any) -> matmul.MatmulResult:
    rows = [matmul.make_row(t, n, 2 * n**3 / (g * 1e9), 3, "1.0")
            for t, gs in (("numpy", (1.5, 40.25)), ("torch", (0.75, 55.5)))
            for n, g in zip((16, 256), gs)]
    peak = {"theoretical": {"value": 100.0, "unit": "GFLOP/s", "source": "cpuinfo", "reason": ""},
            "assumed": {"value": None, "unit": "GFLOP/s", "source": "", "reason": "unknown"},
            "measured": {"value": 55.5, "unit": "GFLOP/s", "source": "run", "reason": ""}}
    bandwidth = {"theoretical": {"value": None, "unit": "GB/s", "source": "", "reason": "VM"},
                 "measured_copy": {"value": 12.5, "unit": "GB/s", "source": "copy",
                                   "reason": ""}}
    return matmul.MatmulResult("a fixed CPU, 2 usable cores, Linux x86_64", rows,
                               {"tensorflow": "not installed"}, {}, peak, bandwidth,
                               ["peak: fine"], (0.5, 0.75), None)


def loader_result(*_: Any, **__: Any) -> loader.LoaderResult:
    config = loader.LoaderConfig("/data", batches=6, compute_steps=2, repeats=1)
    rows = [loader.LoaderRow("edu_dl", "no prefetch", 0, "0", 0.2),
            loader.LoaderRow("edu_dl", "prefetch=2, 2 threads", 2, "2", 0.125),
            loader.LoaderRow("tf", "tf.data map + prefetch(AUTOTUNE)", -1, "AUTOTUNE", 0.25)]
    result = loader.LoaderResult(config, 0.12, 0.06, rows, {"torch": "not installed"}, DATE)
    loader.finish_rows(result)
    return result


def transfer_result(*_: Any, **__: Any) -> transfer.TransferResult:
    return transfer.TransferResult(
        None, "CuPy is not installed",
        [transfer.BandwidthRow("numpy", "host→host", "pageable", 4096, 1.5e-7),
         transfer.BandwidthRow("numpy", "host→host", "pageable", 2**22, 2.5e-4)],
        [transfer.CopyComputeRow("numpy", 128, 196608, 1e-5, 2e-4)],
        [transfer.FeedRow("edu_dl.graph", "feed", "cpu", 1.25e-3, 800_000, 400_000),
         transfer.FeedRow("edu_dl.graph", "variables", "cpu", 1e-3, 1000, 8)],
        {"tf": "not installed"}, DATE)


def kernels_result(*_: Any, **__: Any) -> kernels.KernelsResult:
    rows = [kernels.KernelRow("naive", 64, 1.5e-5, 34.95, None, 1.25e-7),
            kernels.KernelRow("cublas", 64, 2.5e-6, 209.7, 0.5, 0.0)]
    return kernels.KernelsResult(rows, {"tiled": "NvvmError: no NVVM"}, None,
                                 "fake GPU: no peak", Device("gpu", fake=True))


def conv_rows(*_: Any, **__: Any) -> list[conv.Row]:
    return [conv.Row(size, impl, 10.0 * (k + 1) + j, 25.0 * (k + 1) + j)
            for j, size in enumerate(("conv1 1->8, 8x8", "conv2 8->16, 4x4"))
            for k, impl in enumerate(conv.IMPLEMENTATIONS)]


def twin_reply(twin: str, *_: Any, **__: Any) -> dict[str, Any]:
    if twin == "keras":
        return {"twin": twin, "error": "ImportError: no TensorFlow"}
    return {"twin": twin, "seconds": 1.5e-4 if twin == "numpy" else 4.25e-4,
            "first_loss": 2.5, "last_loss": 1.125}


def trained(world_size: int = 1, *_: Any, **__: Any) -> SimpleNamespace:
    """What edu_dl.parallel's trainers return: losses, times and the final weights."""
    return SimpleNamespace(world_size=world_size, rows_per_rank=[64 // world_size],
                           global_losses=[3.0, 1.5, 0.75], seconds=0.0075 * world_size,
                           wall_seconds=0.125 + 5.5 * (world_size > 1), weights=world_size)


def patch(mp: pytest.MonkeyPatch) -> None:
    """Every benchmark's measurement, date, machine and load replaced by the fixed ones."""
    mp.setenv(FAKE_GPU_ENV, "1")
    mp.setenv("TQDM_DISABLE", "1")
    for module in (engine, plan, conv):
        mp.setattr(module, "machine_lines", lambda device=None: list(MACHINE), raising=False)
        mp.setattr(module, "now", lambda: DATE, raising=False)
    mp.setattr(engine, "run_engine", engine_result)
    mp.setattr(plan, "run_plan", plan_rows)
    mp.setattr(plan, "eager_breakdown", lambda *a, **kw: [
        ("forward", 1.5e-5), ("backward", 1.25e-5), ("optimizer", 2.5e-6), ("in all", 3e-5),
        ("NumPy step", 1.2e-5)])
    mp.setattr(matmul, "run_matmul", matmul_result)
    mp.setattr(loader, "run_loader", loader_result)
    mp.setattr(transfer, "run_transfer", transfer_result)
    mp.setattr(kernels, "run_kernels", kernels_result)
    mp.setattr(conv, "run", conv_rows)
    mp.setattr(conv, "load_average", lambda: 0.5)
    mp.setattr(twins, "run_worker", twin_reply)
    mp.setattr("edu_dl.parallel.make_problem", lambda: SimpleNamespace(batch_size=64))
    mp.setattr("edu_dl.parallel.train_single", lambda problem, **kw: trained(1))
    mp.setattr("edu_dl.parallel.train_data_parallel",
               lambda problem, world_size, **kw: trained(world_size))
    mp.setattr("edu_dl.parallel.max_rel_diff", lambda a, b: 2.5e-16 * (a - b))
    mp.setattr("edu_dl.parallel.pitfalls", lambda parallel, single: "Pitfalls: fixed.\n")


def run_all(out: Path) -> dict[str, int]:
    """Each benchmark's command on its fixed result, its files in ``out/<name>``; exit codes."""
    from edu_dl.cli import main

    mp = pytest.MonkeyPatch()
    out.mkdir(parents=True, exist_ok=True)
    try:
        patch(mp)
        mp.chdir(out)  # the report quotes its command line, --out included
        return {name: main(["bench", *argv, "--no-progress", "--out", name])
                for name, argv in COMMANDS.items()}
    finally:
        mp.undo()


def keep_data_files(out: Path) -> None:
    for path in out.rglob("*"):
        if path.is_file() and path.suffix not in DATA_FILES:
            path.unlink()


if __name__ == "__main__":
    target = Path(sys.argv[1])
    print(run_all(target))
    keep_data_files(target)
