"""Numeric gradient checking: central differences in float64, CS231n's relative error."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edu_dl import backend
from edu_dl.autograd.tensor import Tensor, no_grad


def rel_error(a: Any, b: Any) -> float:
    """max |a - b| / max(1e-8, |a| + |b|), elementwise (CS231n's relative error)."""
    a, b = np.asarray(backend.to_numpy(a), float), np.asarray(backend.to_numpy(b), float)
    if a.size == 0:
        return 0.0
    return float(np.max(np.abs(a - b) / np.maximum(1e-8, np.abs(a) + np.abs(b))))


@dataclass
class GradcheckReport:
    """Analytic against numeric gradients, one row per input that requires grad."""

    errors: list[float] = field(default_factory=list)
    shapes: list[tuple[int, ...]] = field(default_factory=list)
    worst: list[tuple[tuple[int, ...], float, float]] = field(default_factory=list)
    tolerance: float = 1e-6

    @property
    def passed(self) -> bool:
        return all(e <= self.tolerance for e in self.errors)

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        lines = [f"gradcheck {'passed' if self.passed else 'FAILED'} "
                 f"(tolerance {self.tolerance:.0e} on the relative error)"]
        for i, (err, shape, (where, ana, num)) in enumerate(
            zip(self.errors, self.shapes, self.worst)
        ):
            mark = "ok " if err <= self.tolerance else "BAD"
            lines.append(
                f"  {mark} input {i} shape {shape}: rel. error {err:.2e}; worst at {where}: "
                f"analytic {ana:.6g}, numeric {num:.6g}"
            )
        return "\n".join(lines)

    __repr__ = __str__


def gradcheck(
    fn: Callable[..., Tensor],
    *inputs: Any,
    eps: float = 1e-6,
    tolerance: float = 1e-6,
    seed: int = 0,
) -> GradcheckReport:
    """Compare autograd's gradients of ``fn(*inputs)`` with central differences in float64.

    A non-scalar output is reduced to a scalar by a fixed random projection, so every entry of
    the Jacobian takes part. Inputs that are Tensors with ``requires_grad`` are checked.
    """
    # Floating tensors go to float64; integer ones (labels, indices) keep their dtype.
    params = [
        Tensor(backend.to_numpy(x.data).astype(np.float64 if x.dtype.kind == "f" else x.dtype),
               requires_grad=x.requires_grad)
        if isinstance(x, Tensor) else x
        for x in inputs
    ]
    checked = [i for i, p in enumerate(params) if isinstance(p, Tensor) and p.requires_grad]
    if not checked:
        raise ValueError("gradcheck: no input is a Tensor with requires_grad=True")
    out = fn(*params)
    projection = np.random.default_rng(seed).standard_normal(out.shape)

    def scalar(*args: Any) -> float:
        with no_grad():
            return float(np.sum(backend.to_numpy(fn(*args).data) * projection))

    (out * projection).sum().backward()
    report = GradcheckReport(tolerance=tolerance)
    for i in checked:
        p = params[i]
        analytic = np.zeros(p.shape) if p.grad is None else backend.to_numpy(p.grad.data)
        numeric = np.zeros(p.shape)
        flat = p.data.reshape(-1)  # a view: nudging it nudges the input
        for j in range(flat.size):
            old = flat[j]
            flat[j] = old + eps
            plus = scalar(*params)
            flat[j] = old - eps
            minus = scalar(*params)
            flat[j] = old
            numeric.reshape(-1)[j] = (plus - minus) / (2 * eps)
        err = rel_error(analytic, numeric)
        diff = np.abs(analytic - numeric) / np.maximum(1e-8, np.abs(analytic) + np.abs(numeric))
        where = np.unravel_index(int(np.argmax(diff)), p.shape) if diff.size else ()
        report.errors.append(err)
        report.shapes.append(p.shape)
        report.worst.append((tuple(int(k) for k in where),
                             float(analytic[where]) if diff.size else 0.0,
                             float(numeric[where]) if diff.size else 0.0))
    return report
