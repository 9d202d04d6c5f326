"""The eager engine (define-by-run, like PyTorch): every op runs at once and records itself.

A Tensor made by an op remembers that op; the op remembers its inputs. ``backward()`` sorts that
graph (``core.toposort``) and runs the shared backward loop (``core.backward``) over it, asking
each op for its vector-Jacobian product: micrograd's engine, with an iterative sort,
accumulation, and freeing of what was saved.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

import numpy as np

from edu_dl import backend
from edu_dl.autograd import core, ops
from edu_dl.autograd.operators import Operators
from edu_dl.autograd.ops import FREED, Op


class _GradMode:
    enabled = True


def is_grad_enabled() -> bool:
    """False inside ``no_grad()``: ops then record nothing."""
    return _GradMode.enabled


class set_grad_enabled(contextlib.ContextDecorator):
    """Context (or decorator) that turns recording on or off, and restores it on the way out."""

    def __init__(self, mode: bool) -> None:
        self.mode = mode
        self._previous: list[bool] = []  # a stack: one instance may be entered re-entrantly

    def __enter__(self) -> None:
        self._previous.append(_GradMode.enabled)
        _GradMode.enabled = self.mode

    def __exit__(self, *exc: object) -> None:
        _GradMode.enabled = self._previous.pop()


class no_grad(set_grad_enabled):
    """Context (or decorator) in which ops build no graph: for updates and evaluation."""

    def __init__(self) -> None:
        super().__init__(False)


class enable_grad(set_grad_enabled):
    """Context that turns recording back on inside ``no_grad()``."""

    def __init__(self) -> None:
        super().__init__(True)


def _check_can_require_grad(data: Any) -> None:
    if data.dtype.kind not in "fc":
        raise TypeError(
            f"only floating-point tensors can require gradients, got dtype {data.dtype}"
        )


# --------------------------------------------------------------------------- running an op


def apply(op_cls: type[Op], inputs: tuple[Any, ...], attrs: dict[str, Any]) -> Tensor:
    """Run ``op_cls`` now; if a gradient may flow back through it, record it in the output.

    Every op applied to a Tensor comes here, through ``Op.apply``. At tiny sizes this function
    is most of an op's cost, so the operators' usual case, one or two Tensors of NumPy arrays,
    runs without the lists and loops that any other needs (``_run``); benchmarks/RESULTS.md
    measures it.
    """
    op = op_cls(**attrs) if attrs else op_cls()
    needs: tuple[bool, ...]
    if len(inputs) == 2:
        x, y = inputs
        if isinstance(x, Tensor) and isinstance(y, Tensor) and (
                x.data.__class__ is np.ndarray and y.data.__class__ is np.ndarray):
            try:
                out = op.forward(np, x.data, y.data)
            except (ValueError, TypeError, IndexError) as exc:
                raise core.op_error(exc, op.name, [x.data, y.data]) from exc
            needs = (x.requires_grad, y.requires_grad)
        else:
            out, inputs, needs = _run(op, inputs)
    elif len(inputs) == 1 and inputs[0].data.__class__ is np.ndarray:
        x = inputs[0]
        try:
            out = op.forward(np, x.data)
        except (ValueError, TypeError, IndexError) as exc:
            raise core.op_error(exc, op.name, [x.data]) from exc
        needs = (x.requires_grad,)
    else:
        out, inputs, needs = _run(op, inputs)
    t = _new(Tensor)
    t.data, t.grad = out, None
    if True in needs and _GradMode.enabled:
        op.inputs, op.needs = inputs, needs
        t._op, t.requires_grad = op, True
    else:
        t._op, t.requires_grad = None, False
    return t


def _run(op: Op, inputs: tuple[Any, ...]) -> tuple[Any, tuple[Tensor, ...], tuple[bool, ...]]:
    """``op`` on any inputs: numbers and arrays become constant Tensors, any array library."""
    tensors = inputs
    for x in inputs:
        if not isinstance(x, Tensor):
            tensors = _as_tensors(inputs)
            break
    arrays = [t.data for t in tensors]
    xp = np
    for a in arrays:
        if a.__class__ is not np.ndarray:  # NumPy only is the common case, checked cheaply
            xp = backend.get_xp(*arrays)
            break
    try:
        out = op.forward(xp, *arrays)
    except (ValueError, TypeError, IndexError) as exc:
        raise core.op_error(exc, op.name, arrays) from exc
    return out, tensors, tuple([x.requires_grad for x in tensors])


def _as_tensors(inputs: tuple[Any, ...]) -> tuple[Tensor, ...]:
    """Numbers and arrays among an op's inputs as constant Tensors (core's operand rule)."""
    like = next(x.data for x in inputs if isinstance(x, Tensor))
    xp = backend.get_xp(like)
    return tuple(x if isinstance(x, Tensor) else Tensor._wrap(core.operand(x, like.dtype, xp),
                                                               None, False) for x in inputs)


_new = object.__new__


class Tensor(Operators):
    """An array (NumPy or CuPy) that can record the ops applied to it and compute gradients.

    Operators and methods (``+``, ``@``, ``exp``, ``sum``...) come from ``Operators``.
    """

    __slots__ = ("__weakref__", "_op", "data", "grad", "requires_grad")

    data: Any
    grad: Tensor | None
    requires_grad: bool
    _op: Op | None

    def __init__(
        self,
        data: Any,
        requires_grad: bool = False,
        dtype: Any = None,
        device: str | None = None,
    ) -> None:
        if isinstance(data, Tensor):
            data = data.data
        if device is None:
            device = backend.device_of(data)
        xp = backend.xp_for(device)
        if backend.device_of(data) != device:
            data = backend.to_device(data, device)
        # A copy, as torch.tensor makes: optimizers update .data in place, and the caller's
        # array stays theirs.
        self.data = xp.array(data, dtype=dtype)
        if requires_grad:
            _check_can_require_grad(self.data)
        self.requires_grad = bool(requires_grad)
        self.grad = None
        self._op = None

    @classmethod
    def _wrap(cls, data: Any, op: Op | None, requires_grad: bool) -> Tensor:
        """Fast constructor used by the engine: no conversion, no checks."""
        t = object.__new__(cls)
        t.data, t._op, t.requires_grad, t.grad = data, op, requires_grad, None
        return t

    # The eager engine runs every op applied to a Tensor (see Op.apply).
    _apply_op = staticmethod(apply)

    def _index_value(self) -> Any:
        return self.data

    # ------------------------------------------------------------------ array facts
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def dtype(self) -> Any:
        return self.data.dtype

    @property
    def ndim(self) -> int:
        return int(self.data.ndim)

    @property
    def size(self) -> int:
        return int(self.data.size)

    @property
    def device(self) -> str:
        return backend.device_of(self.data)

    @property
    def is_leaf(self) -> bool:
        """Made by the user, not by an op: only leaves keep ``.grad`` after backward."""
        return self._op is None

    @property
    def xp(self) -> ModuleType:
        return backend.get_xp(self.data)

    def __len__(self) -> int:
        return len(self.data)

    def __repr__(self) -> str:
        body = np.array2string(backend.to_numpy(self.data), separator=", ", prefix="tensor(")
        extra = ", requires_grad=True" if self.requires_grad else ""
        if self.device != "cpu":
            extra += f", device={self.device!r}"
        return f"tensor({body}{extra})"

    def numpy(self) -> np.ndarray:
        """The values as a NumPy array (copied from the GPU if needed)."""
        return backend.to_numpy(self.data)

    def item(self) -> Any:
        if self.data.size != 1:
            raise ValueError(f"item() needs a tensor with one element, got shape {self.shape}")
        return self.data.item()

    def detach(self) -> Tensor:
        """The same values, cut off from the graph."""
        return Tensor._wrap(self.data, None, False)

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        if requires_grad:
            _check_can_require_grad(self.data)
        self.requires_grad = requires_grad
        return self

    def to(self, device: str) -> Tensor:
        """This tensor on 'cpu' or 'gpu' (itself when already there); gradients flow back."""
        backend.check_device(device)
        if device == self.device:
            return self
        return ops.ToDevice.apply(self, device=device)

    def cpu(self) -> Tensor:
        return self.to("cpu")

    def gpu(self) -> Tensor:
        return self.to("gpu")

    # ------------------------------------------------------------------ autograd
    def backward(self, grad: Any = None, retain_graph: bool = False) -> None:
        """Accumulate d(self)/d(leaf) into ``leaf.grad`` for every leaf that requires grad."""
        if not self.requires_grad:
            raise RuntimeError(
                "backward: this tensor does not require grad and has no graph; create the "
                "inputs with requires_grad=True (and not inside no_grad())"
            )
        data = self.data
        xp = np if isinstance(data, _CPU_ARRAYS) else backend.get_xp(data)
        if grad is None:
            if data.size != 1:
                raise RuntimeError(
                    f"backward: a gradient can only be created implicitly for a scalar output, "
                    f"but this tensor has shape {self.shape}; pass grad= of that shape"
                )
            seed = backend.ones_like(xp, data)
        else:
            seed = grad.data if isinstance(grad, Tensor) else grad
            seed = xp.array(seed, dtype=data.dtype)  # a copy: the user keeps theirs
            if seed.shape != data.shape:
                raise ValueError(
                    f"backward: grad has shape {tuple(seed.shape)} but the tensor has shape "
                    f"{self.shape}"
                )
        backward_pass(self, seed, retain_graph)


# --------------------------------------------------------------------------- backward


def backward_pass(root: Tensor, seed: Any, retain_graph: bool = False) -> None:
    """Sort root's graph, run the core loop from ``seed`` (leaves accumulate ``.grad``), then
    free what the ops saved for it, unless ``retain_graph``."""
    order = core.toposort([root], parents)
    core.backward(order, {root: seed}, vjp)
    if not retain_graph:
        for t in order:
            if t._op is not None:
                t._op.saved = FREED


def parents(t: Tensor) -> tuple[Tensor, ...]:
    """The inputs of the op that made ``t`` (none for a leaf)."""
    return () if t._op is None else t._op.inputs


def vjp(t: Tensor, grad: Any) -> Iterable[tuple[Tensor, Any]]:
    """Each input's share of ``grad``, from the op that made ``t``; a leaf keeps its gradient."""
    op = t._op
    if op is None:
        if t.requires_grad:
            _accumulate_leaf(t, grad)
        return ()
    if op.saved is FREED:
        raise _freed(op)
    return zip(op.inputs, op.backward(grad))


def _freed(op: Op) -> RuntimeError:
    return RuntimeError(
        f"backward: trying to go through the graph a second time (the arrays saved by "
        f"'{op.name}' were freed after the first backward); call backward(retain_graph=True) "
        f"the first time if you need to go through it again"
    )


def _accumulate_leaf(t: Tensor, g: Any) -> None:
    if t.grad is not None:
        g = t.grad.data + g
    # A read-only view, or a NumPy scalar from 0-d arithmetic: give the user a writeable array.
    # (Checked cheaply: reading .flags costs a microsecond, and fresh arrays are writeable.)
    if g.__class__ is np.ndarray:
        if g.base is not None and not g.flags.writeable:
            g = g.copy()
    elif isinstance(g, np.generic) or not getattr(g.flags, "writeable", True):
        g = backend.get_xp(g).array(g)
    t.grad = Tensor._wrap(g, None, False)


_CPU_ARRAYS = (np.ndarray, np.generic)  # a full reduction gives a NumPy scalar


def tensor(
    data: Any, dtype: Any = None, requires_grad: bool = False, device: str | None = None
) -> Tensor:
    """Make a Tensor from an array, a list or a number (on 'cpu' unless ``device='gpu'``)."""
    return Tensor(data, requires_grad=requires_grad, dtype=dtype, device=device)


def _factory(fill: Callable[..., Any]) -> Callable[..., Tensor]:
    @functools.wraps(fill)
    def make(
        *shape: Any, dtype: Any = np.float32, requires_grad: bool = False, device: str = "cpu"
    ) -> Tensor:
        if len(shape) == 1 and isinstance(shape[0], tuple | list):
            shape = tuple(shape[0])
        data = fill(backend.xp_for(device), shape, dtype)
        return Tensor._wrap(data, None, False).requires_grad_(requires_grad)

    return make


zeros = _factory(lambda xp, shape, dtype: xp.zeros(shape, dtype=dtype))
ones = _factory(lambda xp, shape, dtype: xp.ones(shape, dtype=dtype))
