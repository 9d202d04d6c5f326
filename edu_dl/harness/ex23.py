"""Exercise 23 (Triton), public half: how its parts launch a student's ``@triton.jit`` kernel, and
a generic hint about an unwritten tail. Nothing here computes an answer.

Each ``call_*`` launches the student's kernel itself, as exercise 3's launch a CUDA kernel: the
grid and the block size come from the case, so a kernel whose loads and stores are not masked
meets a block that runs past the data. The tensors it gets are views into larger buffers: the
input's neighbours hold NaN (an unmasked load brings NaN into the result); the output starts as
NaN (an element no program stores stays NaN) and its neighbours as :data:`GUARD`, a value no
kernel computes here (an unmasked store overwrites it). A call returns ``(out, written_outside)``:
the output view as a NumPy array and the number of buffer elements outside it that the kernel
changed (an unmasked store), which the oracle expects to be 0.

Triton decides at ``@triton.jit`` time whether a kernel is compiled or interpreted: with
``TRITON_INTERPRET=1`` in the environment it runs in Triton's interpreter, on CPU tensors (the
grading sandbox sets it, and the exercise's first cell). A compiled kernel gets CUDA tensors.
This module never imports triton, and torch only inside a call.

The source check (:data:`KERNEL_SOURCE`: a ``@triton.jit`` function that reads its program id,
loads and stores) is the grader's, on the notebook's text: check() finds no source for a Triton
kernel object (``own_source`` looks for a plain function), and says nothing there; a function
that is no Triton kernel fails check() at the launch already.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from edu_dl.grading.authoring.hints import Rule
from edu_dl.grading.authoring.source import AllChecks, all_checks, decorator_names, names_check
from edu_dl.grading.authoring.spec import CheckFailure, Verdict

Case = tuple[Any, ...]
GUARD = -1.25e30  # the output buffer's value outside the output: no leaky ReLU or norm gives it

INTERPRET_NOTE = ("set os.environ['TRITON_INTERPRET'] = '1' before `import triton` (the "
                  "notebook's first cell does), then run the kernel's cell again")


def kernel_or_fail(kernel: Any, what: str) -> tuple[Any, str]:
    """The student's Triton kernel and the device its tensors live on ("cpu" in the
    interpreter, "cuda" compiled); NotImplementedError for the unsolved stub."""
    kind = type(kernel).__name__
    code = getattr(getattr(kernel, "fn", kernel), "__code__", None)
    if code is not None and "NotImplementedError" in code.co_names:
        raise NotImplementedError  # the stub, decorated or not
    if not type(kernel).__module__.startswith("triton") or not hasattr(kernel, "__getitem__"):
        raise CheckFailure(f"{what} must be a Triton kernel: decorate the function with "
                           f"@triton.jit (got {kind})")
    if kind == "InterpretedFunction":
        return kernel, "cpu"
    import torch

    if not torch.cuda.is_available():
        raise CheckFailure(f"{what} was compiled for a GPU, and there is none: {INTERPRET_NOTE}")
    return kernel, "cuda"


def _buffer(shape: tuple[int, ...], device: str, fill: float = float("nan")) -> Any:
    import torch

    return torch.full(shape, fill, dtype=torch.float32, device=device)


def _outside(buffer: Any, inside: Any) -> int:
    """How many elements of ``buffer`` outside the view (marked by the boolean ``inside``) no
    longer hold GUARD: the kernel stored there."""
    values = buffer.detach().cpu().numpy()
    return int(((values != np.float32(GUARD)) & ~inside).sum())


def call_leaky(fn: Any, args: Case) -> tuple[np.ndarray, int]:
    """leaky_relu_kernel[(cdiv(n, block),)](x, out, n, slope, BLOCK=block) on float32 views of n
    elements inside buffers with ``block`` NaN on each side; returns (out, written_outside)."""
    x, slope, block = args
    kernel, device = kernel_or_fail(fn, "leaky_relu_kernel")
    import torch

    n, block = int(np.shape(x)[0]), int(block)
    x_buffer = _buffer((n + 2 * block,), device)
    out_buffer = _buffer((n + 2 * block,), device, GUARD)
    out_buffer[block:block + n] = float("nan")
    x_buffer[block:block + n] = torch.as_tensor(np.asarray(x, dtype=np.float32), device=device)
    x_view, out_view = x_buffer[block:block + n], out_buffer[block:block + n]
    kernel[(-(-n // block),)](x_view, out_view, n, float(slope), BLOCK=block)
    inside = np.zeros(n + 2 * block, dtype=bool)
    inside[block:block + n] = True
    return out_view.detach().cpu().numpy().copy(), _outside(out_buffer, inside)


def call_layer_norm(fn: Any, args: Case) -> tuple[np.ndarray, int]:
    """layer_norm_kernel[(m,)](x, out, stride, n_cols, eps, BLOCK=block): x and out are the first
    n_cols columns of (m + 1, stride) float32 buffers (rows ``stride`` elements apart);
    returns (out, written_outside)."""
    x, eps, block, stride = args
    kernel, device = kernel_or_fail(fn, "layer_norm_kernel")
    import torch

    m, n_cols = np.shape(x)
    stride, block = int(stride), int(block)
    x_buffer = _buffer((m + 1, stride), device)
    out_buffer = _buffer((m + 1, stride), device, GUARD)
    out_buffer[:m, :n_cols] = float("nan")
    x_buffer[:m, :n_cols] = torch.as_tensor(np.asarray(x, dtype=np.float32), device=device)
    x_view, out_view = x_buffer[:m, :n_cols], out_buffer[:m, :n_cols]
    kernel[(m,)](x_view, out_view, stride, n_cols, float(eps), BLOCK=block)
    inside = np.zeros((m + 1, stride), dtype=bool)
    inside[:m, :n_cols] = True
    return out_view.detach().cpu().numpy().copy(), _outside(out_buffer, inside)


# --------------------------------------------------------------------------- source checks


@dataclass(frozen=True)
class TritonJitCheck:
    """A source check: the definition is decorated with a ``jit`` (``@triton.jit``,
    ``@triton.jit(...)``). Data only."""

    what: str = "the function"

    def __call__(self, source: str) -> Verdict:
        if any(name.split(".")[-1] == "jit" for name in decorator_names(source)):
            return Verdict(True)
        return Verdict(False, f"{self.what} is not a Triton kernel: decorate it with @triton.jit")


KERNEL_SOURCE: AllChecks = all_checks(TritonJitCheck(), names_check(required=[
    (("program_id",), "the kernel never reads its program's index (tl.program_id(0)): each "
                      "program computes its own block"),
    (("load",), "the kernel never loads (tl.load): it reads its block through pointers"),
    (("store",), "the kernel never stores (tl.store): it writes its block through pointers"),
]))


# --------------------------------------------------------------------------- hints


@dataclass(frozen=True)
class TailUnwritten(Rule):
    """NaN in a run of the last elements only (the output starts as NaN): no program stored
    there."""

    def test(self, expected: Any, got: Any, args: Case) -> bool:
        nan = np.isnan(np.asarray(got, dtype=float))
        if nan.shape != np.shape(expected) or nan.ndim != 1 or not nan.any():
            return False
        first = int(np.argmax(nan))
        return bool(first > 0 and nan[first:].all())
