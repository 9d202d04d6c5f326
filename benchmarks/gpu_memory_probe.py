#!/usr/bin/env python3
"""GPU memory-system probe (recorded outside the project's commands, for the lecture on the GPU
as it really works): coalescing in a naive matmul, transposes, reductions, fusion of
memory-bound work, attention's N^2 memory, and the device's own properties.

Standalone: needs CuPy with a CUDA GPU (and PyTorch with CUDA for the attention part). Without a
GPU it says so in one sentence and exits 0. Every time is a median of CUDA-event timings after
warm-ups; bandwidths count the fewest bytes the operation must move unless a column says otherwise.

    python3 gpu_memory_probe.py --out DIR      # writes DIR/gpu_memory_probe.json and .txt
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import traceback
from typing import Any, Callable

import numpy as np

RESULTS: dict[str, Any] = {"probe": "gpu_memory_probe", "errors": []}
OUT_DIR = "."
REPS, WARM = 20, 3

# ----------------------------------------------------------------------------- CUDA C kernels

MATMUL_SRC = r"""
// C = A @ B, all N x N row-major float32; one thread per element of C, no tiling.
// coalesced: threadIdx.x walks j, the contiguous index of B and C (a warp reads one B row segment,
//            A[i, k] is one broadcast address).
extern "C" __global__ void mm_coalesced(const float* A, const float* B, float* C, int N) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= N || j >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < N; ++k) acc += A[i * N + k] * B[k * N + j];
    C[i * N + j] = acc;
}
// strided: threadIdx.x walks i, across rows: a warp's 32 loads of A[i, k] are N floats apart
//          (32 segments per load instruction), and its stores to C are strided too.
extern "C" __global__ void mm_strided(const float* A, const float* B, float* C, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int j = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= N || j >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < N; ++k) acc += A[i * N + k] * B[k * N + j];
    C[i * N + j] = acc;
}
"""

TRANSPOSE_SRC = r"""
#define TILE 32
#define ROWS 8
// blocks of 32 x 8 threads; each block handles one 32 x 32 tile; n is a multiple of 32.
extern "C" __global__ void copy_tiles(const float* in, float* out, int n) {
    int x = blockIdx.x * TILE + threadIdx.x, y = blockIdx.y * TILE + threadIdx.y;
    for (int r = 0; r < TILE; r += ROWS) out[(y + r) * n + x] = in[(y + r) * n + x];
}
// coalesced reads, writes n floats apart across the warp
extern "C" __global__ void transpose_naive(const float* in, float* out, int n) {
    int x = blockIdx.x * TILE + threadIdx.x, y = blockIdx.y * TILE + threadIdx.y;
    for (int r = 0; r < TILE; r += ROWS) out[x * n + (y + r)] = in[(y + r) * n + x];
}
// through a shared-memory tile: coalesced both ways; a column read of tile[32][32] hits one bank
extern "C" __global__ void transpose_tiled_nopad(const float* in, float* out, int n) {
    __shared__ float tile[TILE][TILE];
    int x = blockIdx.x * TILE + threadIdx.x, y = blockIdx.y * TILE + threadIdx.y;
    for (int r = 0; r < TILE; r += ROWS) tile[threadIdx.y + r][threadIdx.x] = in[(y + r) * n + x];
    __syncthreads();
    x = blockIdx.y * TILE + threadIdx.x; y = blockIdx.x * TILE + threadIdx.y;
    for (int r = 0; r < TILE; r += ROWS) out[(y + r) * n + x] = tile[threadIdx.x][threadIdx.y + r];
}
// the same with one float of padding per row: a column of the tile spans all 32 banks
extern "C" __global__ void transpose_tiled_pad(const float* in, float* out, int n) {
    __shared__ float tile[TILE][TILE + 1];
    int x = blockIdx.x * TILE + threadIdx.x, y = blockIdx.y * TILE + threadIdx.y;
    for (int r = 0; r < TILE; r += ROWS) tile[threadIdx.y + r][threadIdx.x] = in[(y + r) * n + x];
    __syncthreads();
    x = blockIdx.y * TILE + threadIdx.x; y = blockIdx.x * TILE + threadIdx.y;
    for (int r = 0; r < TILE; r += ROWS) out[(y + r) * n + x] = tile[threadIdx.x][threadIdx.y + r];
}
"""

REDUCE_SRC = r"""
// every thread adds its element straight into one float in global memory
extern "C" __global__ void reduce_atomic(const float* x, float* out, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(out, x[i]);
}
// grid-stride sum in a register, then a shared-memory tree (blockDim 256), one atomic per block
extern "C" __global__ void reduce_tree(const float* x, float* out, long long n) {
    __shared__ float s[256];
    float acc = 0.0f;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) acc += x[i];
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(out, s[0]);
}
// grid-stride sum in a register, then warp shuffles (no shared memory but 32 floats), one atomic
extern "C" __global__ void reduce_shfl(const float* x, float* out, long long n) {
    __shared__ float warp_sums[32];
    float acc = 0.0f;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) acc += x[i];
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (lane == 0) warp_sums[w] = acc;
    __syncthreads();
    if (w == 0) {
        acc = lane < (int)(blockDim.x >> 5) ? warp_sums[lane] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
        if (lane == 0) atomicAdd(out, acc);
    }
}
"""

SOFTMAX_SRC = r"""
// softmax over each row of a (rows, COLS) float32 matrix: one block of THREADS threads per row,
// the row held in registers (COLS / THREADS values a thread): x read once, y written once.
#define THREADS 256
#define PER (COLS / THREADS)
__device__ float block_reduce(float v, bool is_max) {
    __shared__ float buf[THREADS / 32];
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, w) : v + w;
    }
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    if (lane == 0) buf[wid] = v;
    __syncthreads();
    v = lane < THREADS / 32 ? buf[lane] : (is_max ? __int_as_float(0xff800000) : 0.0f);
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, w) : v + w;
    }
    __syncthreads();  // buf is reused by the next call
    return v;
}
extern "C" __global__ void softmax_rows(const float* x, float* y, int rows) {
    int row = blockIdx.x;
    if (row >= rows) return;
    const float* xr = x + (unsigned long long)row * COLS;
    float* yr = y + (unsigned long long)row * COLS;
    float v[PER];
    float m = __int_as_float(0xff800000);
#pragma unroll
    for (int j = 0; j < PER; ++j) { v[j] = xr[j * THREADS + threadIdx.x]; m = fmaxf(m, v[j]); }
    m = block_reduce(m, true);
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < PER; ++j) { v[j] = expf(v[j] - m); s += v[j]; }
    s = block_reduce(s, false);
    float inv = 1.0f / s;
#pragma unroll
    for (int j = 0; j < PER; ++j) yr[j * THREADS + threadIdx.x] = v[j] * inv;
}
"""

# ----------------------------------------------------------------------------- helpers


def write_outputs(table: str | None = None) -> None:
    """The JSON (rewritten after every part, so a crash keeps what was measured) and the table."""
    os.makedirs(OUT_DIR, exist_ok=True)
    with open(os.path.join(OUT_DIR, "gpu_memory_probe.json"), "w", encoding="utf-8") as f:
        json.dump(RESULTS, f, indent=1, default=str)
        f.write("\n")
    if table is not None:
        with open(os.path.join(OUT_DIR, "gpu_memory_probe.txt"), "w", encoding="utf-8") as f:
            f.write(table)


def part(name: str) -> Callable[[Callable[[], None]], Callable[[], None]]:
    """Run a part; an exception is recorded (and printed) and the next part runs."""
    def wrap(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            print(f"--- {name}", flush=True)
            try:
                fn()
            except Exception as e:  # a probe: keep going, record what broke
                msg = f"{name}: {type(e).__name__}: {e}"
                print("FAILED", msg, flush=True)
                traceback.print_exc()
                RESULTS["errors"].append(msg[:2000])
            write_outputs()
        return run
    return wrap


def cp_time(fn: Callable[[], Any], reps: int | None = None, warm: int | None = None
            ) -> dict[str, float]:
    """Median (and min, max) of CUDA-event times of fn on CuPy's current stream, in ms."""
    import cupy as cp
    reps, warm = reps or REPS, warm if warm is not None else WARM
    for _ in range(warm):
        fn()
    cp.cuda.Device().synchronize()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    ts = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        ts.append(cp.cuda.get_elapsed_time(start, end))
    return {"median_ms": statistics.median(ts), "min_ms": min(ts), "max_ms": max(ts),
            "reps": reps, "warmups": warm}


def torch_time(fn: Callable[[], Any], reps: int | None = None, warm: int | None = None
               ) -> dict[str, float]:
    import torch
    reps, warm = reps or REPS, warm if warm is not None else WARM
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        ts.append(start.elapsed_time(end))
    return {"median_ms": statistics.median(ts), "min_ms": min(ts), "max_ms": max(ts),
            "reps": reps, "warmups": warm}


def gbps(nbytes: float, t: dict[str, float]) -> float:
    return nbytes / (t["median_ms"] * 1e-3) / 1e9


def rel_err(out: Any, ref: Any) -> float:
    """||out - ref|| / ||ref|| in float64; NaN (an unwritten, poisoned element) gives inf."""
    import cupy as cp
    o, r = cp.asarray(out, dtype=cp.float64), cp.asarray(ref, dtype=cp.float64)
    if not bool(cp.isfinite(o).all()):
        return float("inf")
    return float(cp.linalg.norm(o - r) / cp.linalg.norm(r))


# ----------------------------------------------------------------------------- the parts


@part("versions and device properties")
def device_properties() -> None:
    import cupy as cp
    rt = cp.cuda.runtime
    v: dict[str, Any] = {"python": platform.python_version(), "numpy": np.__version__,
                         "cupy": cp.__version__, "cuda_runtime": rt.runtimeGetVersion(),
                         "cuda_driver_api": rt.driverGetVersion()}
    try:
        v["nvrtc"] = ".".join(map(str, cp.cuda.nvrtc.getVersion()))
    except Exception as e:
        v["nvrtc"] = f"unknown ({type(e).__name__})"
    try:
        import torch
        v["torch"] = torch.__version__
        v["torch_cuda"] = torch.version.cuda
        v["cudnn"] = torch.backends.cudnn.version()
    except Exception as e:
        v["torch"] = f"not importable ({type(e).__name__})"
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,"
             "clocks.max.sm,clocks.max.mem,power.limit,temperature.gpu,pstate",
             "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        v["nvidia_smi"] = smi.stdout.strip() or smi.stderr.strip()
        v["nvidia_smi_fields"] = ("name, driver_version, memory.total, clocks.sm, clocks.mem, "
                                  "clocks.max.sm, clocks.max.mem, power.limit, temperature.gpu, "
                                  "pstate")
    except Exception as e:
        v["nvidia_smi"] = f"not run ({type(e).__name__})"
    RESULTS["versions"] = v
    print(json.dumps(v, indent=1), flush=True)

    dev = cp.cuda.Device(0)
    attrs = {  # cudaDeviceAttr numbers (driver_types.h)
        "multiprocessor_count": 16, "warp_size": 10, "max_threads_per_block": 1,
        "max_threads_per_multiprocessor": 39, "max_blocks_per_multiprocessor": 106,
        "registers_per_block": 12, "registers_per_multiprocessor": 82,
        "shared_memory_per_block_bytes": 8, "shared_memory_per_block_optin_bytes": 97,
        "shared_memory_per_multiprocessor_bytes": 81, "l2_cache_bytes": 38,
        "max_persisting_l2_bytes": 108, "total_constant_memory_bytes": 9,
        "sm_clock_khz": 13, "memory_clock_khz": 36, "memory_bus_width_bits": 37,
        "compute_capability_major": 75, "compute_capability_minor": 76,
    }
    d: dict[str, Any] = {}
    props = rt.getDeviceProperties(0)
    name = props.get("name", b"?")
    d["name"] = name.decode() if isinstance(name, bytes) else str(name)
    d["total_memory_bytes"] = props.get("totalGlobalMem")
    for key, num in attrs.items():
        try:
            d[key] = rt.deviceGetAttribute(num, dev.id)
        except Exception as e:
            d[key] = f"unavailable ({type(e).__name__})"
    clk, bus = d.get("memory_clock_khz"), d.get("memory_bus_width_bits")
    if isinstance(clk, int) and isinstance(bus, int) and clk > 0 and bus > 0:
        # double data rate: two transfers per clock, bus_width / 8 bytes each
        d["theoretical_bandwidth_GBps"] = 2 * clk * 1e3 * bus / 8 / 1e9
    d["from_cudaGetDeviceProperties"] = {
        k: props[k] for k in ("multiProcessorCount", "l2CacheSize", "sharedMemPerBlock",
                              "sharedMemPerMultiprocessor", "regsPerMultiprocessor",
                              "maxThreadsPerMultiProcessor", "warpSize", "memoryClockRate",
                              "memoryBusWidth", "clockRate", "major", "minor")
        if k in props}
    try:
        import torch
        p = torch.cuda.get_device_properties(0)
        d["from_torch"] = {k: getattr(p, k) for k in
                           ("name", "multi_processor_count", "L2_cache_size", "total_memory",
                            "max_threads_per_multi_processor", "regs_per_multiprocessor",
                            "shared_memory_per_block", "shared_memory_per_multiprocessor",
                            "warp_size") if hasattr(p, k)}
    except Exception as e:
        d["from_torch"] = f"unavailable ({type(e).__name__})"
    RESULTS["device"] = d
    print(json.dumps(d, indent=1, default=str), flush=True)


@part("bandwidth ceiling: device-to-device copies")
def bandwidth_ceiling() -> None:
    import cupy as cp
    n = 2**28  # 1 GiB of float32
    a = cp.random.random(n, dtype=cp.float32)
    b = cp.empty_like(a)
    res: dict[str, Any] = {"bytes_each_way": a.nbytes, "counting": "bytes read + bytes written"}
    t = cp_time(lambda: b.data.copy_from_device(a.data, a.nbytes))
    res["cudaMemcpy_d2d"] = {**t, "GBps": gbps(2 * a.nbytes, t)}
    t = cp_time(lambda: cp.copyto(b, a))
    res["cupy_copyto_kernel"] = {**t, "GBps": gbps(2 * a.nbytes, t)}
    RESULTS["bandwidth_ceiling"] = res
    del a, b
    cp.get_default_memory_pool().free_all_blocks()
    print({k: round(v["GBps"], 1) for k, v in res.items() if isinstance(v, dict)}, flush=True)


@part("naive matmul: coalesced vs strided thread mapping")
def matmul_naive() -> None:
    import cupy as cp
    n = 2048
    mod = cp.RawModule(code=MATMUL_SRC)
    rng = cp.random.default_rng(1)
    A = rng.standard_normal((n, n), dtype=cp.float32)
    B = rng.standard_normal((n, n), dtype=cp.float32)
    C = cp.empty((n, n), dtype=cp.float32)
    ref = A.astype(cp.float64) @ B.astype(cp.float64)
    block = (32, 8)
    res: dict[str, Any] = {
        "n": n, "dtype": "float32", "block": list(block),
        "note": "requested_load_GBps counts the 2*n^3*4 bytes the threads' loads ask for "
                "(each thread reads a row of A and a column of B; A, B, C total "
                f"{3 * n * n * 4 / 2**20:.0f} MiB, inside L2, so L1/L2 serve most of it); "
                "min_bytes_GBps counts A and B read once and C written once",
        "variants": {}}
    flops, requested, minimal = 2 * n**3, 2 * n**3 * 4, 3 * n * n * 4
    for name in ("mm_coalesced", "mm_strided"):
        k = mod.get_function(name)
        grid = ((n + block[0] - 1) // block[0], (n + block[1] - 1) // block[1])
        args = (A, B, C, np.int32(n))
        C.fill(cp.nan)
        k(grid, block, args)
        err = rel_err(C, ref)
        t = cp_time(lambda k=k, grid=grid, args=args: k(grid, block, args))
        res["variants"][name] = {**t, "rel_error": err, "GFLOPs": flops / t["median_ms"] / 1e6,
                                 "requested_load_GBps": gbps(requested, t),
                                 "min_bytes_GBps": gbps(minimal, t)}
    C.fill(cp.nan)
    cp.matmul(A, B, out=C)
    err = rel_err(C, ref)
    t = cp_time(lambda: cp.matmul(A, B, out=C))
    res["variants"]["cublas_cupy_matmul"] = {
        **t, "rel_error": err, "GFLOPs": flops / t["median_ms"] / 1e6,
        "requested_load_GBps": None, "min_bytes_GBps": gbps(minimal, t)}
    v = res["variants"]
    res["strided_over_coalesced_time"] = v["mm_strided"]["median_ms"] / v["mm_coalesced"]["median_ms"]
    RESULTS["matmul_naive"] = res
    for name, r in v.items():
        print(f"{name:22s} {r['median_ms']:9.3f} ms  {r['GFLOPs']:9.1f} GFLOP/s  err {r['rel_error']:.1e}",
              flush=True)


@part("transpose 8192 x 8192 float32")
def transpose() -> None:
    import cupy as cp
    n = 8192
    mod = cp.RawModule(code=TRANSPOSE_SRC)
    x = cp.random.default_rng(2).standard_normal((n, n), dtype=cp.float32)
    y = cp.empty_like(x)
    nbytes = 2 * x.nbytes
    res: dict[str, Any] = {"n": n, "dtype": "float32", "bytes_moved": nbytes,
                           "block": [32, 8], "tile": 32, "variants": {}}
    grid, block = (n // 32, n // 32), (32, 8)
    ref_t = x.T
    for name in ("copy_tiles", "transpose_naive", "transpose_tiled_nopad", "transpose_tiled_pad"):
        k = mod.get_function(name)
        y.fill(cp.nan)
        k(grid, block, (x, y, np.int32(n)))
        ok = bool(cp.array_equal(y, x if name == "copy_tiles" else ref_t))
        t = cp_time(lambda k=k: k(grid, block, (x, y, np.int32(n))))
        res["variants"][name] = {**t, "exact": ok, "GBps": gbps(nbytes, t)}
    t = cp_time(lambda: cp.copyto(y, x.T))  # CuPy's own strided copy kernel
    res["variants"]["cupy_copyto_of_x.T"] = {**t, "exact": None, "GBps": gbps(nbytes, t)}
    RESULTS["transpose"] = res
    for name, r in res["variants"].items():
        print(f"{name:24s} {r['median_ms']:8.3f} ms  {r['GBps']:8.1f} GB/s  exact {r['exact']}",
              flush=True)


@part("reduction: sum of 2^26 float32")
def reduction() -> None:
    import cupy as cp
    n = 2**26
    mod = cp.RawModule(code=REDUCE_SRC)
    x = cp.random.default_rng(3).random(n, dtype=cp.float32)  # uniform [0, 1): sum ~ 3.4e7
    ref = float(cp.sum(x, dtype=cp.float64))
    out = cp.zeros(1, dtype=cp.float32)
    sms = cp.cuda.runtime.deviceGetAttribute(16, 0)
    threads = 256
    res: dict[str, Any] = {
        "n": n, "dtype": "float32", "bytes_read": x.nbytes, "input": "uniform [0, 1)",
        "reference_sum_float64": ref, "threads_per_block": threads,
        "accuracy_note": "atomic_one_per_thread rounds every add into one float32 near the "
                         "total (its ulp grows to 2 and 4 there); the others add small partial "
                         "sums",
        "note": "each timed call includes zeroing the 4-byte accumulator (one tiny memset); "
                "one_per_thread: n/256 blocks; grid_stride: 8 blocks of 256 per SM",
        "variants": {}}
    configs = [("atomic_one_per_thread", "reduce_atomic", n // threads),
               ("tree_one_per_thread", "reduce_tree", n // threads),
               ("shuffle_one_per_thread", "reduce_shfl", n // threads),
               ("tree_grid_stride", "reduce_tree", 8 * sms),
               ("shuffle_grid_stride", "reduce_shfl", 8 * sms)]
    for label, kname, blocks in configs:
        k = mod.get_function(kname)

        def call(k: Any = k, blocks: int = blocks) -> None:
            out.fill(0)
            k((blocks,), (threads,), (x, out, np.int64(n)))
        call()
        got = float(out.get()[0])
        t = cp_time(call)
        res["variants"][label] = {**t, "blocks": blocks, "sum": got,
                                  "rel_error": abs(got - ref) / ref, "GBps": gbps(x.nbytes, t)}
    got = float(cp.sum(x))
    t = cp_time(lambda: cp.sum(x))
    res["variants"]["cupy.sum"] = {**t, "blocks": None, "sum": got,
                                   "rel_error": abs(got - ref) / ref, "GBps": gbps(x.nbytes, t)}
    RESULTS["reduction"] = res
    for name, r in res["variants"].items():
        print(f"{name:24s} {r['median_ms']:8.3f} ms  {r['GBps']:8.1f} GB/s  rel err {r['rel_error']:.1e}",
              flush=True)


@part("fusion: elementwise chain and row softmax")
def fusion() -> None:
    import cupy as cp
    res: dict[str, Any] = {}
    # y = relu(x * a + b) * c over 2^26 float32
    n = 2**26
    x = cp.random.default_rng(4).standard_normal(n, dtype=cp.float32)
    a, b, c = np.float32(1.5), np.float32(-0.25), np.float32(0.75)
    arr = x.nbytes
    ref = cp.maximum(x.astype(cp.float64) * 1.5 - 0.25, 0) * 0.75

    def unfused() -> Any:
        t1 = x * a          # read x, write t1
        t2 = t1 + b         # read t1, write t2
        t3 = cp.maximum(t2, np.float32(0))  # read t2, write t3
        return t3 * c       # read t3, write y
    ek = cp.ElementwiseKernel("float32 x, float32 a, float32 b, float32 c", "float32 y",
                              "y = fmaxf(x * a + b, 0.0f) * c", "relu_affine_scale")

    @cp.fuse()
    def fused_fuse(x: Any, a: Any, b: Any, c: Any) -> Any:
        return cp.maximum(x * a + b, np.float32(0)) * c
    y = cp.empty_like(x)
    chain: dict[str, Any] = {
        "n": n, "dtype": "float32", "expr": "y = relu(x * a + b) * c (a, b, c scalars)",
        "min_bytes": 2 * arr, "variants": {}}
    for name, fn, passes in [("unfused_4_cupy_ops", unfused, 4),
                             ("fused_ElementwiseKernel", lambda: ek(x, a, b, c, y), 1),
                             ("fused_cupy.fuse", lambda: fused_fuse(x, a, b, c), 1)]:
        try:
            y.fill(cp.nan)
            got = fn()
            err = rel_err(y if got is None else got, ref)
            t = cp_time(fn)
        except Exception as ex:  # one variant failing leaves the others
            RESULTS["errors"].append(f"elementwise {name}: {type(ex).__name__}: {ex}"[:2000])
            continue
        moved = 2 * arr * passes
        chain["variants"][name] = {**t, "passes": passes, "bytes_moved": moved,
                                   "GBps_bytes_moved": gbps(moved, t),
                                   "GBps_min_bytes": gbps(2 * arr, t), "rel_error": err}
    res["elementwise_chain"] = chain
    del x, y, ref
    cp.get_default_memory_pool().free_all_blocks()

    # softmax over the rows of (8192, 4096) float32
    rows, cols = 8192, 4096
    x = cp.random.default_rng(5).standard_normal((rows, cols), dtype=cp.float32) * 4
    arr = x.nbytes
    xd = x.astype(cp.float64)
    e = cp.exp(xd - xd.max(axis=1, keepdims=True))
    ref = e / e.sum(axis=1, keepdims=True)
    del xd, e

    def soft_unfused() -> Any:
        m = x.max(axis=1, keepdims=True)    # read x
        d = x - m                           # read x, write d
        ex = cp.exp(d)                      # read d, write ex
        s = ex.sum(axis=1, keepdims=True)   # read ex
        return ex / s                       # read ex, write y
    mod = cp.RawModule(code=SOFTMAX_SRC, options=(f"-DCOLS={cols}",))
    k = mod.get_function("softmax_rows")
    y = cp.empty_like(x)
    soft: dict[str, Any] = {"shape": [rows, cols], "dtype": "float32", "min_bytes": 2 * arr,
                            "note": "unfused: 5 CuPy ops (max, subtract, exp, sum, divide), 8 "
                                    "array-sized reads/writes; fused: one block of 256 threads "
                                    "per row, the row in registers", "variants": {}}
    cases: list[tuple[str, Callable[[], Any], int]] = [
        ("unfused_5_cupy_ops", soft_unfused, 8),
        ("fused_rawkernel_one_block_per_row",
         lambda: k((rows,), (256,), (x, y, np.int32(rows))), 2)]
    for name, fn, transfers in cases:
        try:
            y.fill(cp.nan)
            got = fn()
            err = rel_err(y if got is None else got, ref)
            t = cp_time(fn)
        except Exception as ex:
            RESULTS["errors"].append(f"softmax {name}: {type(ex).__name__}: {ex}"[:2000])
            continue
        soft["variants"][name] = {**t, "bytes_moved": transfers * arr,
                                  "GBps_bytes_moved": gbps(transfers * arr, t),
                                  "GBps_min_bytes": gbps(2 * arr, t), "rel_error": err}
    try:
        import torch
        xt = torch.from_dlpack(x)
        got = torch.softmax(xt, dim=1)
        err = rel_err(cp.from_dlpack(got), ref)
        t = torch_time(lambda: torch.softmax(xt, dim=1))
        soft["variants"]["torch.softmax"] = {**t, "bytes_moved": 2 * arr,
                                             "GBps_bytes_moved": gbps(2 * arr, t),
                                             "GBps_min_bytes": gbps(2 * arr, t), "rel_error": err}
    except Exception as ex:
        soft["torch.softmax"] = f"not run ({type(ex).__name__}: {ex})"
    res["softmax_rows"] = soft
    RESULTS["fusion"] = res
    for sec in ("elementwise_chain", "softmax_rows"):
        for name, r in res[sec]["variants"].items():
            print(f"{sec} {name:34s} {r['median_ms']:8.3f} ms  {r['GBps_min_bytes']:8.1f} GB/s "
                  f"(min bytes)  err {r['rel_error']:.1e}", flush=True)
    del x, y, ref
    cp.get_default_memory_pool().free_all_blocks()


@part("attention: naive vs scaled_dot_product_attention")
def attention() -> None:
    try:
        import torch
        import torch.nn.functional as F
        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device")
    except Exception as e:
        RESULTS["attention"] = f"skipped: torch with CUDA is not usable here ({e})"
        print(RESULTS["attention"], flush=True)
        return
    import cupy as cp
    cp.get_default_memory_pool().free_all_blocks()
    B, H, d = 8, 16, 64
    res: dict[str, Any] = {"B": B, "H": H, "d": d, "dtype": "float16", "causal": False,
                           "note": "peak_MiB: torch.cuda.max_memory_allocated during one call "
                                   "minus what was allocated before it (q, k, v excluded, the "
                                   "output included)", "by_N": {}}

    def naive(q: Any, k: Any, v: Any) -> Any:
        s = (q @ k.transpose(-2, -1)) * (d ** -0.5)   # B x H x N x N scores
        return torch.softmax(s, dim=-1) @ v

    backends: list[tuple[str, Any]] = [("sdpa_default", None)]
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        for nm in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION"):
            if hasattr(SDPBackend, nm):
                backends.append((f"sdpa_{nm.lower()}", getattr(SDPBackend, nm)))
    except Exception as e:
        res["backends_note"] = f"torch.nn.attention not usable: {e}"
        sdpa_kernel = None
    torch.manual_seed(0)
    for N in (512, 1024, 2048, 4096):
        q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=torch.float16) for _ in range(3))
        flops = 4 * B * H * N * N * d
        row: dict[str, Any] = {"scores_bytes_fp16": B * H * N * N * 2}
        with torch.no_grad():
            ref = naive(q.float(), k.float(), v.float())
            variants: list[tuple[str, Callable[[], Any]]] = [("naive", lambda: naive(q, k, v))]
            for nm, be in backends:
                if be is None:
                    variants.append((nm, lambda: F.scaled_dot_product_attention(q, k, v)))
                else:
                    def call(be: Any = be) -> Any:
                        with sdpa_kernel(be):
                            return F.scaled_dot_product_attention(q, k, v)
                    variants.append((nm, call))
            for nm, fn in variants:
                try:
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                    base = torch.cuda.memory_allocated()
                    out = fn()
                    torch.cuda.synchronize()
                    peak = torch.cuda.max_memory_allocated() - base
                    err = float((out.float() - ref).norm() / ref.norm())
                    del out
                    t = torch_time(fn)
                    row[nm] = {**t, "peak_MiB": peak / 2**20, "rel_error": err,
                               "TFLOPs": flops / (t["median_ms"] * 1e-3) / 1e12}
                except Exception as e:
                    row[nm] = f"failed: {type(e).__name__}: {str(e)[:300]}"
        res["by_N"][str(N)] = row
        print(N, {nm: (round(r["median_ms"], 3), round(r["peak_MiB"], 1))
                  if isinstance(r, dict) else r for nm, r in row.items() if nm != "scores_bytes_fp16"},
              flush=True)
        del q, k, v, ref
        torch.cuda.empty_cache()
    RESULTS["attention"] = res


# ----------------------------------------------------------------------------- the table


def fmt(v: Any, spec: str) -> str:
    return format(v, spec) if isinstance(v, (int, float)) and v is not None else "-"


def table(r: dict[str, Any]) -> str:
    """A readable summary of whatever parts are in r."""
    L: list[str] = []
    v, d = r.get("versions", {}), r.get("device", {})
    L.append(f"gpu_memory_probe on {d.get('name', '?')}, {r.get('date_utc', '?')}")
    L.append(f"versions: python {v.get('python')}, numpy {v.get('numpy')}, cupy {v.get('cupy')}, "
             f"CUDA runtime {v.get('cuda_runtime')}, driver API {v.get('cuda_driver_api')}, "
             f"torch {v.get('torch')}")
    L.append(f"nvidia-smi ({v.get('nvidia_smi_fields', '')}): {v.get('nvidia_smi', '?')}")
    L.append(f"timing: CUDA events, median of {r.get('reps')} after {r.get('warmups')} warm-ups")
    if d:
        L.append("")
        L.append("device properties (as the GPU reports them)")
        for key in ("multiprocessor_count", "compute_capability_major", "compute_capability_minor",
                    "warp_size", "max_threads_per_multiprocessor", "max_blocks_per_multiprocessor",
                    "registers_per_multiprocessor", "registers_per_block",
                    "shared_memory_per_block_bytes", "shared_memory_per_block_optin_bytes",
                    "shared_memory_per_multiprocessor_bytes", "l2_cache_bytes", "sm_clock_khz",
                    "memory_clock_khz", "memory_bus_width_bits", "total_memory_bytes",
                    "theoretical_bandwidth_GBps"):
            if key in d:
                L.append(f"  {key:40s} {fmt(d[key], ',.0f') if isinstance(d[key], (int, float)) else d[key]}")
    bw = r.get("bandwidth_ceiling")
    if bw:
        L.append("")
        L.append("bandwidth ceiling, 1 GiB device-to-device copy (read + write counted)")
        for name in ("cudaMemcpy_d2d", "cupy_copyto_kernel"):
            if name in bw:
                L.append(f"  {name:28s} {bw[name]['median_ms']:9.3f} ms {bw[name]['GBps']:9.1f} GB/s")
    m = r.get("matmul_naive")
    if m:
        L.append("")
        L.append(f"naive matmul {m['n']}x{m['n']} float32 (one thread per output, block 32x8)")
        L.append(f"  {'variant':22s} {'ms':>9s} {'GFLOP/s':>9s} {'req.load GB/s':>14s} {'rel.err':>8s}")
        for name, x in m["variants"].items():
            L.append(f"  {name:22s} {x['median_ms']:9.3f} {x['GFLOPs']:9.1f} "
                     f"{fmt(x['requested_load_GBps'], '14.1f'):>14s} {x['rel_error']:8.1e}")
        L.append(f"  strided / coalesced time: {m['strided_over_coalesced_time']:.1f}x")
    t = r.get("transpose")
    if t:
        L.append("")
        L.append(f"transpose {t['n']}x{t['n']} float32 (read + write counted)")
        for name, x in t["variants"].items():
            L.append(f"  {name:24s} {x['median_ms']:9.3f} ms {x['GBps']:9.1f} GB/s  exact {x['exact']}")
    red = r.get("reduction")
    if red:
        L.append("")
        L.append(f"reduction: sum of {red['n']} float32 (bytes read once counted)")
        for name, x in red["variants"].items():
            L.append(f"  {name:24s} {x['median_ms']:9.3f} ms {x['GBps']:9.1f} GB/s  "
                     f"rel.err {x['rel_error']:.1e}")
    f = r.get("fusion")
    if f:
        for sec, title in (("elementwise_chain", "elementwise y = relu(x*a+b)*c, 2^26 float32"),
                           ("softmax_rows", "softmax over rows of (8192, 4096) float32")):
            if sec not in f:
                continue
            L.append("")
            L.append(f"{title}: GB/s by bytes the version moves and by the fewest bytes")
            for name, x in f[sec]["variants"].items():
                L.append(f"  {name:34s} {x['median_ms']:8.3f} ms {x['bytes_moved'] / 2**20:7.0f} MiB "
                         f"{x['GBps_bytes_moved']:8.1f} GB/s moved {x['GBps_min_bytes']:8.1f} GB/s min "
                         f"err {x['rel_error']:.1e}")
    a = r.get("attention")
    if isinstance(a, str):
        L += ["", f"attention: {a}"]
    elif a:
        L.append("")
        L.append(f"attention B={a['B']} H={a['H']} d={a['d']} float16: ms / peak MiB / TFLOP/s")
        for N, row in a["by_N"].items():
            for name, x in row.items():
                if name == "scores_bytes_fp16":
                    continue
                if isinstance(x, dict):
                    L.append(f"  N={N:>5s} {name:28s} {x['median_ms']:8.3f} ms {x['peak_MiB']:9.1f} MiB "
                             f"{x['TFLOPs']:7.1f} TFLOP/s err {x['rel_error']:.1e}")
                else:
                    L.append(f"  N={N:>5s} {name:28s} {x}")
    if r.get("errors"):
        L += ["", "errors:"] + [f"  {e}" for e in r["errors"]]
    return "\n".join(L) + "\n"


# ----------------------------------------------------------------------------- main


def gpu_missing() -> str | None:
    """Why no GPU can be probed here, or None."""
    try:
        import cupy as cp
    except Exception as e:
        return f"CuPy is not importable ({type(e).__name__})"
    try:
        if cp.cuda.runtime.getDeviceCount() < 1:
            return "CuPy sees no CUDA device"
    except Exception as e:
        return f"CuPy sees no CUDA device ({type(e).__name__})"
    return None


def main(argv: list[str] | None = None) -> int:
    global OUT_DIR, REPS, WARM
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for the JSON and table")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    args = p.parse_args(argv)
    OUT_DIR, REPS, WARM = args.out, max(20, args.reps), args.warmup
    why = gpu_missing()
    if why:
        print(f"gpu_memory_probe: no CUDA GPU here ({why}), so nothing was measured.")
        return 0
    RESULTS.update({"date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(
        timespec="seconds"), "reps": REPS, "warmups": WARM, "argv": sys.argv})
    for fn in (device_properties, bandwidth_ceiling, matmul_naive, transpose, reduction, fusion,
               attention):
        fn()
    text = table(RESULTS)
    write_outputs(text)
    print()
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
