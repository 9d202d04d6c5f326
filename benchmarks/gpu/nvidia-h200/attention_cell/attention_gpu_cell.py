"""Lecture 18's live-GPU cell (section 5), run as a script on an NVIDIA H200 (2026-11-26): naive
attention against F.scaled_dot_product_attention, CUDA events, peak memory."""
import math
import statistics

import torch
import torch.nn.functional as F

from edu_dl import attention as att
from edu_dl.gpu import timing as gpu_timing
from edu_dl.notebook.lecture import on_gpu

def attention_on_your_gpu():
    b, h, n, dh = 8, 16, 2048, 64
    q, k, v = (torch.randn(b, h, n, dh, device="cuda", dtype=torch.float16) for _ in range(3))

    def naive():
        return torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(dh), dim=-1) @ v

    def fused():
        return F.scaled_dot_product_attention(q, k, v)

    scores_mib = b * h * n * n * 2 / 2**20
    print(f"{torch.cuda.get_device_name()}: B={b} H={h} N={n} d={dh} float16, S = {scores_mib:.0f} MiB")
    for name, fn in (("naive", naive), ("sdpa", fused)):
        fn()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        out = fn()
        torch.cuda.synchronize()
        peak_mib = (torch.cuda.max_memory_allocated() - before) / 2**20
        del out
        seconds = statistics.median(gpu_timing.time_events(
            fn, lambda: torch.cuda.Event(enable_timing=True), warmup=3, repeats=10))
        tflops = att.attention_flops(n, dh, heads=b * h) / seconds / 1e12
        print(f"  {name:5s} {seconds * 1e3:7.3f} ms  peak {peak_mib:7.1f} MiB "
              f"({peak_mib / scores_mib:.2f} x S)  {tflops:5.1f} TFLOP/s")


on_gpu(attention_on_your_gpu, "measuring attention on your GPU", needs=("torch",))
