"""What lecture 14 shows of ``torch.compile``: the C++ compiler Inductor needs on a CPU, the first
call (compile + run) timed apart from later calls, and Inductor's generated code cut down to the
part worth reading (its kernels and the ``call`` function that runs them).

PyTorch is imported inside the functions: importing this module costs nothing.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# A generated kernel: `cpp_fused_add_mul_0 = async_compile.cpp_pybinding([...], r'''` up to `''')`.
_KERNEL_START = re.compile(r"^\w+ = async_compile\.\w+\(")
_KERNEL_END = "''')"
_CALL_START = re.compile(r"^(\s*)def call\(")


def cpp_compiler() -> str | None:
    """The C++ compiler Inductor builds its CPU kernels with ('g++', ...), or None where it finds
    none (then ``torch.compile``'s default backend fails at the first call on a CPU)."""
    from torch._inductor import cpp_builder, exc

    try:
        return str(cpp_builder.get_cpp_compiler())
    except exc.InvalidCxxCompiler:
        return None


@dataclass(frozen=True)
class FirstCall:
    """The first call of a compiled function: its result, its seconds (capture, compile and one
    run together) and the Python modules Inductor wrote for it (one per graph)."""

    result: Any
    seconds: float
    code: list[str]


def first_call(compiled: Callable[..., Any], *args: Any,
               clock: Callable[[], float] = time.perf_counter) -> FirstCall:
    """Call ``compiled`` (a fresh ``torch.compile`` result) once, timing it and keeping the code
    Inductor generates meanwhile (PyTorch's own ``run_and_get_code``, what TORCH_LOGS=output_code
    prints)."""
    from torch._inductor.utils import run_and_get_code

    start = clock()
    result, code = run_and_get_code(compiled, *args)
    return FirstCall(result, clock() - start, list(code))


def kernels_and_call(code: str, max_lines: int = 60) -> str:
    """The readable part of one generated module: each kernel's source and the ``call`` function
    that allocates the buffers and launches the kernels; imports and benchmark helpers dropped.
    At most ``max_lines`` lines, the cut said in a last line."""
    if max_lines < 1:
        raise ValueError(f"max_lines must be at least 1, not {max_lines}")
    kept: list[str] = []
    lines = code.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if _KERNEL_START.match(line):
            end = next((j for j in range(i, len(lines)) if lines[j].strip() == _KERNEL_END),
                       len(lines) - 1)
            kept += [*lines[i:end + 1], ""]
            i = end + 1
            continue
        call = _CALL_START.match(line)
        if call:
            indent = len(call.group(1))
            end = i + 1
            while end < len(lines) and (not lines[end].strip() or
                                        len(lines[end]) - len(lines[end].lstrip()) > indent):
                end += 1
            kept += [text[indent:] for text in lines[i:end]]
            i = end
            continue
        i += 1
    while kept and not kept[-1].strip():
        kept.pop()
    if len(kept) > max_lines:
        cut = len(kept) - max_lines + 1
        kept = [*kept[:max_lines - 1], f"... ({cut} more lines)"]
    return "\n".join(kept)
