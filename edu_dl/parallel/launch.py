"""Start R worker processes that form one ``torch.distributed`` process group on this machine.

The parent owns the rendezvous: a ``TCPStore`` server on 127.0.0.1 whose port the OS picks (port 0),
so no port is guessed and nothing listens beyond loopback. Each worker joins the store, runs
``worker(rank, world_size, device, *args)``, and always destroys its process group. The parent
waits with a deadline: a worker that raises stops the others and its traceback reaches the parent
as a ``WorkerError``; a worker that hangs is killed and the parent raises ``TimeoutError``.
"""

from __future__ import annotations

import os
import pickle
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.multiprocessing.spawn import ProcessException

from edu_dl.backend import DeviceError, gpu_status

HOST = "127.0.0.1"  # loopback only: the workers never talk beyond this machine
BACKENDS = ("gloo", "nccl")
GRACE_S = 2.0  # how long the surviving workers get to exit after one fails, before SIGTERM/SIGKILL


class WorkerError(RuntimeError):
    """A worker process raised; the message carries its rank and traceback."""


def choose_backend(backend: str | None, world_size: int) -> str:
    """NCCL when every rank can have its own CUDA GPU, else gloo (CPU processes)."""
    usable, why_not = gpu_status("torch")
    gpus = torch.cuda.device_count() if usable else 0
    if backend is None:
        return "nccl" if dist.is_nccl_available() and gpus >= world_size else "gloo"
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
    if backend == "nccl" and (not dist.is_nccl_available() or gpus < world_size):
        raise DeviceError(
            f"backend 'nccl' needs {world_size} CUDA GPUs, one per worker; this machine has "
            f"{gpus}{'' if usable else f' ({why_not})'}. Use backend='gloo' (CPU processes) or "
            "backend=None to choose automatically."
        )
    return backend


def device_for(backend: str, rank: int) -> torch.device:
    """One GPU per rank under NCCL, the CPU under gloo: the only place the two paths differ."""
    return torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")


def loopback_interface() -> str | None:
    """The loopback network interface's name ('lo' on Linux, 'lo0' on macOS), if there is one."""
    names = [name for _, name in socket.if_nameindex()]
    return next((name for name in ("lo", "lo0") if name in names), None)


def _entry(
    rank: int,
    world_size: int,
    port: int,
    backend: str,
    timeout_s: float,
    run_dir: str,
) -> None:
    """Runs in each child: join the group, run the worker, save its result, leave the group."""
    with open(Path(run_dir) / "task.pkl", "rb") as fh:
        worker, args = pickle.load(fh)
    interface = loopback_interface()
    if interface is not None:
        # gloo and NCCL open their own peer sockets; bind them to loopback as well.
        os.environ.setdefault("GLOO_SOCKET_IFNAME", interface)
        os.environ.setdefault("NCCL_SOCKET_IFNAME", interface)
    # R processes share the cores: without this each would start one thread per core.
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
    device = device_for(backend, rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    timeout = timedelta(seconds=timeout_s)
    try:
        store = dist.TCPStore(HOST, port, world_size, is_master=False, timeout=timeout)
        dist.init_process_group(
            backend, store=store, rank=rank, world_size=world_size, timeout=timeout
        )
        result = worker(rank, world_size, device, *args)
        with open(Path(run_dir) / f"rank{rank}.pkl", "wb") as fh:
            pickle.dump(result, fh)
    except Exception:
        # Record the failure BEFORE leaving the group: leaving makes the other ranks' pending
        # collectives fail too, and the parent must blame the rank that failed first.
        stamp = f"{time.time_ns()}\n{traceback.format_exc()}"
        (Path(run_dir) / f"rank{rank}.error").write_text(stamp)
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    # The result is saved and the group is left: exit now. Python's normal teardown can run C++
    # destructors while a gloo/DDP helper thread is still joinable, and that aborts the process
    # ("terminate called without an active exception", SIGABRT), seen under load.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _start_method(worker: Callable[..., Any]) -> str:
    """Fork from a server that imported torch once ("forkserver": a clean process, never this
    one, so as safe with CUDA and threads as "spawn"), where there is one (not on Windows).
    Each spawned worker imported torch itself: about 3 s of CPU per worker, per call, where a
    lecture makes a dozen calls. The server starts at the first call and stays until this
    process ends; modules asked for after it started are imported by each worker instead."""
    if "forkserver" not in mp.get_all_start_methods():
        return "spawn"
    preload = ["torch", "torch.distributed", __name__, getattr(worker, "__module__", None)]
    mp.set_forkserver_preload([m for m in preload if m and m != "__main__"])
    return "forkserver"


def _kill_all(context: Any) -> None:
    for process in context.processes:
        if process.is_alive():
            process.terminate()
    for process in context.processes:
        process.join(GRACE_S)
        if process.is_alive():
            process.kill()
            process.join()


def run_workers(
    worker: Callable[..., Any],
    world_size: int = 2,
    args: tuple[Any, ...] = (),
    backend: str | None = None,
    timeout_s: float = 120.0,
) -> list[Any]:
    """Run ``worker(rank, world_size, device, *args)`` in ``world_size`` new processes.

    ``worker`` must be importable (a module-level function) and return something picklable;
    the results come back in rank order. Every worker has exited when this returns or raises
    (the fork server they came from stays, see ``_start_method``).
    """
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    backend = choose_backend(backend, world_size)
    # The parent hosts the store; port 0 lets the OS pick a free port with no race.
    store = dist.TCPStore(
        HOST,
        0,
        world_size,
        is_master=True,
        timeout=timedelta(seconds=timeout_s),
        wait_for_workers=False,
    )
    with tempfile.TemporaryDirectory(prefix="edu_dl_parallel_") as run_dir:
        # The task goes through a file, not the spawn pipe: CPython's parent blocks forever
        # writing a payload over the pipe buffer (64 KiB) to a child that died before reading it.
        with open(Path(run_dir) / "task.pkl", "wb") as fh:
            pickle.dump((worker, args), fh)
        context = mp.start_processes(
            _entry,
            args=(world_size, store.port, backend, timeout_s, run_dir),
            nprocs=world_size,
            join=False,
            daemon=True,
            start_method=_start_method(worker),
        )
        deadline = time.monotonic() + timeout_s
        try:
            while not context.join(
                timeout=max(0.0, deadline - time.monotonic()), grace_period=GRACE_S
            ):
                if time.monotonic() >= deadline:
                    raise TimeoutError(
                        f"data-parallel workers did not finish within {timeout_s:g} s "
                        f"(backend {backend}, world_size {world_size}); they were killed"
                    )
        except ProcessException as exc:
            raise WorkerError(_failure_message(Path(run_dir), exc, world_size)) from None
        finally:
            _kill_all(context)
            for path in context.error_files:  # torch leaves a traceback file per failed rank
                Path(path).unlink(missing_ok=True)
        results = []
        for rank in range(world_size):
            with open(Path(run_dir) / f"rank{rank}.pkl", "rb") as fh:
                results.append(pickle.load(fh))
    return results


def _failure_message(run_dir: Path, exc: ProcessException, world_size: int) -> str:
    """First line: the rank that failed FIRST and its exception; then its traceback."""
    failures = []
    for path in run_dir.glob("rank*.error"):
        stamp, trace = path.read_text().split("\n", 1)
        failures.append((int(stamp), int(path.stem[4:]), trace.rstrip()))
    if not failures:  # it died without a Python exception (a signal, os._exit, a failed import)
        return (
            f"data-parallel worker rank {exc.error_index} of {world_size} died: {exc}. "
            "See its stderr above; a script that starts workers must guard its top level "
            "with `if __name__ == '__main__':`, since each spawned worker re-imports it."
        )
    failures.sort()
    _, rank, trace = failures[0]
    lines = [f"data-parallel worker rank {rank} of {world_size} failed: {trace.splitlines()[-1]}"]
    lines += [f"(then rank {r} failed too: {t.splitlines()[-1][:200]})" for _, r, t in failures[1:]]
    return "\n".join([*lines, "--- worker traceback ---", trace])
