"""The eager engine (define-by-run, like PyTorch): every op runs at once and records itself.

A Tensor made by an op remembers that op; the op remembers its inputs. ``backward()`` walks this
graph in reverse topological order and asks each op for its vector-Jacobian product: micrograd's
engine, with an iterative sort, accumulation, and freeing of what was saved.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import itertools
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

import numpy as np

from .. import backend
from . import ops
from .ops import FREED, Op

F = TypeVar("F", bound=Callable[..., Any])


class _GradMode:
    enabled = True


def is_grad_enabled() -> bool:
    """False inside ``no_grad()``: ops then record nothing."""
    return _GradMode.enabled


class no_grad(contextlib.ContextDecorator):
    """Context (or decorator) in which ops build no graph: for updates and evaluation."""

    def __init__(self) -> None:
        self._previous: list[bool] = []  # a stack: one instance may be entered re-entrantly

    def __enter__(self) -> None:
        self._previous.append(_GradMode.enabled)
        _GradMode.enabled = False

    def __exit__(self, *exc: object) -> None:
        _GradMode.enabled = self._previous.pop()


class enable_grad(contextlib.ContextDecorator):
    """Context that turns recording back on inside ``no_grad()``."""

    def __init__(self) -> None:
        self._previous: list[bool] = []  # a stack: one instance may be entered re-entrantly

    def __enter__(self) -> None:
        self._previous.append(_GradMode.enabled)
        _GradMode.enabled = True

    def __exit__(self, *exc: object) -> None:
        _GradMode.enabled = self._previous.pop()


def _check_can_require_grad(data: Any) -> None:
    if data.dtype.kind not in "fc":
        raise TypeError(
            f"only floating-point tensors can require gradients, got dtype {data.dtype}"
        )


class Tensor:
    """An array (NumPy or CuPy) that can record the ops applied to it and compute gradients."""

    __slots__ = ("__weakref__", "_op", "_seq", "data", "grad", "requires_grad")
    # Make NumPy hand `ndarray + Tensor` to Tensor.__radd__ instead of looping over elements.
    __array_ufunc__ = None

    data: Any
    grad: Tensor | None
    requires_grad: bool
    _op: Op | None
    _seq: int  # creation order: every op's output is newer than its inputs

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
        self._seq = next(_SEQUENCE)

    @classmethod
    def _wrap(cls, data: Any, op: Op | None, requires_grad: bool) -> Tensor:
        """Fast constructor used by the engine: no conversion, no checks."""
        t = object.__new__(cls)
        t.data, t._op, t.requires_grad, t.grad = data, op, requires_grad, None
        t._seq = next(_SEQUENCE)
        return t

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
        return apply_eager(ops.ToDevice, (self,), {"device": device})

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
        _run_backward(self, seed, retain_graph)

    # ------------------------------------------------------------------ operators
    def __add__(self, other: Any) -> Tensor:
        return _binary(ops.Add, self, other)

    def __radd__(self, other: Any) -> Tensor:
        return apply_eager(ops.Add, (other, self), {})

    def __sub__(self, other: Any) -> Tensor:
        return _binary(ops.Sub, self, other)

    def __rsub__(self, other: Any) -> Tensor:
        return apply_eager(ops.Sub, (other, self), {})

    def __mul__(self, other: Any) -> Tensor:
        return _binary(ops.Mul, self, other)

    def __rmul__(self, other: Any) -> Tensor:
        return apply_eager(ops.Mul, (other, self), {})

    def __truediv__(self, other: Any) -> Tensor:
        return _binary(ops.Div, self, other)

    def __rtruediv__(self, other: Any) -> Tensor:
        return apply_eager(ops.Div, (other, self), {})

    def __neg__(self) -> Tensor:
        return _unary(ops.Neg(), self)

    def __pow__(self, exponent: float) -> Tensor:
        return _unary(ops.Pow(exponent), self)

    def __matmul__(self, other: Any) -> Tensor:
        return _binary(ops.MatMul, self, other)

    def __rmatmul__(self, other: Any) -> Tensor:
        return apply_eager(ops.MatMul, (other, self), {})

    def __getitem__(self, index: Any) -> Tensor:
        return apply_eager(ops.GetItem, (self,), {"index": _raw_index(index)})

    # ------------------------------------------------------------------ methods
    def matmul(self, other: Any) -> Tensor:
        return self @ other

    def exp(self) -> Tensor:
        return _unary(ops.Exp(), self)

    def log(self) -> Tensor:
        return _unary(ops.Log(), self)

    def sqrt(self) -> Tensor:
        return _unary(ops.Sqrt(), self)

    def tanh(self) -> Tensor:
        return _unary(ops.Tanh(), self)

    def sigmoid(self) -> Tensor:
        return _unary(ops.Sigmoid(), self)

    def relu(self) -> Tensor:
        return _unary(ops.ReLU(), self)

    def maximum(self, other: Any) -> Tensor:
        return _binary(ops.Maximum, self, other)

    def sum(self, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Tensor:
        return _unary(ops.Sum(axis, keepdims), self)

    def mean(self, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Tensor:
        return _unary(ops.Mean(axis, keepdims), self)

    def max(self, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Tensor:
        return _unary(ops.Max(axis, keepdims), self)

    def reshape(self, *shape: Any) -> Tensor:
        if len(shape) == 1 and isinstance(shape[0], tuple | list):
            shape = tuple(shape[0])
        return apply_eager(ops.Reshape, (self,), {"shape": shape})

    def transpose(self, *axes: Any) -> Tensor:
        if len(axes) == 1 and isinstance(axes[0], tuple | list):
            axes = tuple(axes[0])
        return apply_eager(ops.Transpose, (self,), {"axes": axes or None})

    @property
    def T(self) -> Tensor:
        return self.transpose()

    def broadcast_to(self, shape: tuple[int, ...]) -> Tensor:
        return apply_eager(ops.BroadcastTo, (self,), {"shape": tuple(shape)})


def _raw_index(index: Any) -> Any:
    """Indices may hold Tensors (as PyTorch allows); ops see raw arrays."""
    if isinstance(index, Tensor):
        return index.data
    if isinstance(index, tuple):
        return tuple(i.data if isinstance(i, Tensor) else i for i in index)
    return index


def _as_constant(x: Any, like: Any) -> Any:
    """A non-Tensor operand as an array; Python numbers take the Tensor's dtype (no upcast)."""
    if isinstance(x, bool | int | float) and like is not None:
        # An int joins an integer tensor's dtype, never a bool one (True + 5 is 6, not True).
        if like.dtype.kind in "fc" or (isinstance(x, bool | int) and like.dtype.kind in "iu"):
            return backend.get_xp(like).asarray(x, dtype=like.dtype)
    if isinstance(x, int | float | bool | complex | list | tuple):
        xp = backend.get_xp(like) if like is not None else np
        return xp.asarray(x)
    backend.namespace_of(x)  # a clear TypeError for anything that is not an array
    return x


def apply_eager(cls: type[Op], inputs: tuple[Any, ...], attrs: dict[str, Any]) -> Tensor:
    """Run op ``cls`` now; if any input requires grad (and grad mode is on), record it.

    The general path, for any number of inputs. Tensor's operators and methods take the
    one- and two-input shortcuts below, which do the same with fewer steps.
    """
    arrays = []
    for x in inputs:
        if not isinstance(x, Tensor):
            return _apply_with_constants(cls, inputs, attrs)
        arrays.append(x.data)
    op = cls(**attrs) if attrs else cls()
    xp = np
    for a in arrays:
        if a.__class__ is not _ndarray:
            xp = backend.get_xp(*arrays)
            break
    try:
        out = op.forward(xp, *arrays)
    except (ValueError, TypeError, IndexError) as exc:
        raise _named_error(exc, op, arrays) from exc
    needs = tuple([x.requires_grad for x in inputs])
    return _output(out, op, inputs, needs, True in needs)


# The hot path of every eager program: a tiny training step runs these 7 times, and each line
# costs ~0.05 µs, so they are kept flat (no loops, no *args).


def _unary(op: Op, x: Tensor) -> Tensor:
    """Run the one-input ``op`` (already made with its attributes) on Tensor ``x``."""
    a = x.data
    xp = np if a.__class__ is _ndarray else backend.get_xp(a)
    try:
        out = op.forward(xp, a)
    except (ValueError, TypeError, IndexError) as exc:
        raise _named_error(exc, op, [a]) from exc
    t = _new_tensor(Tensor)
    t.data, t.grad, t._seq = out, None, next(_SEQUENCE)
    if x.requires_grad and _GradMode.enabled:
        op.inputs, op.needs = (x,), _NEEDS_ONE
        t._op, t.requires_grad = op, True
    else:
        t._op, t.requires_grad = None, False
    return t


def _binary(cls: type[Op], x: Tensor, y: Any) -> Tensor:
    """Run the two-input ``cls`` on Tensor ``x`` and ``y`` (a Tensor, an array or a number)."""
    if not isinstance(y, Tensor):
        return _apply_with_constants(cls, (x, y), {})
    a, b = x.data, y.data
    if a.__class__ is _ndarray and b.__class__ is _ndarray:
        xp = np
    else:
        xp = backend.get_xp(a, b)
    op = cls()
    try:
        out = op.forward(xp, a, b)
    except (ValueError, TypeError, IndexError) as exc:
        raise _named_error(exc, op, [a, b]) from exc
    t = _new_tensor(Tensor)
    t.data, t.grad, t._seq = out, None, next(_SEQUENCE)
    need_x, need_y = x.requires_grad, y.requires_grad
    if (need_x or need_y) and _GradMode.enabled:
        op.inputs, op.needs = (x, y), (need_x, need_y)
        t._op, t.requires_grad = op, True
    else:
        t._op, t.requires_grad = None, False
    return t


def _output(
    out: Any, op: Op, inputs: tuple[Tensor, ...], needs: tuple[bool, ...], requires: bool
) -> Tensor:
    """Wrap ``out``; record ``op`` as its maker when a gradient may flow through it."""
    t = _new_tensor(Tensor)
    t.data, t.grad, t._seq = out, None, next(_SEQUENCE)
    if requires and _GradMode.enabled:
        op.inputs, op.needs = inputs, needs
        t._op, t.requires_grad = op, True
    else:
        t._op, t.requires_grad = None, False
    return t


def _apply_with_constants(cls: type[Op], inputs: tuple[Any, ...], attrs: dict[str, Any]) -> Any:
    """Numbers and arrays among the inputs become constant Tensors (or the op joins a graph)."""
    if any(getattr(type(x), "_build_node", None) for x in inputs):
        return ops._apply(cls, inputs, attrs)  # a static-graph node among the inputs
    like = next((x.data for x in inputs if isinstance(x, Tensor)), None)
    return apply_eager(cls, tuple(
        x if isinstance(x, Tensor) else Tensor._wrap(_as_constant(x, like), None, False)
        for x in inputs), attrs)


def _named_error(exc: Exception, op: Op, arrays: list[Any]) -> Exception:
    """Name the op and its input shapes in an error, unless the message already does."""
    message = str(exc)
    if message.startswith(op.name + ":"):
        return exc
    return type(exc)(f"{op.describe(tuple(arrays))}: {message}")


def _run_backward(root: Tensor, seed: Any, retain_graph: bool) -> None:
    """Visit tensors newest first. Creation order is a topological order, so when a tensor is
    popped every consumer reachable from the root has already given it its gradient."""
    grads: dict[Tensor, Any] = {}  # pending gradients of tensors in the heap (hashed by id)
    heap: list[tuple[int, Tensor]] = []
    pop, push, freed = heapq.heappop, heapq.heappush, FREED
    t, g = root, seed
    while True:
        op = t._op
        if op is None:
            _accumulate_leaf(t, g)
        else:
            if op.saved is freed:
                raise RuntimeError(
                    f"backward: trying to go through the graph a second time (the arrays saved "
                    f"by '{op.name}' were freed after the first backward); call "
                    f"backward(retain_graph=True) the first time if you need to go through it "
                    f"again"
                )
            input_grads = op.backward(g)
            if not retain_graph:
                op.saved = freed
            # The newest input that got its first gradient just now waits here, not in the
            # heap: in a chain it is the next tensor to visit, newer than all that wait.
            newest = newest_grad = None
            needs = op.needs
            for i, x in enumerate(op.inputs):
                gx = input_grads[i]
                if gx is None or not needs[i]:
                    continue
                if x is newest:  # one tensor used twice by this op, as in x * x
                    newest_grad = newest_grad + gx
                    continue
                previous = grads.get(x)
                if previous is not None:
                    grads[x] = previous + gx
                elif newest is None:
                    newest, newest_grad = x, gx
                elif x._seq > newest._seq:
                    grads[newest] = newest_grad
                    push(heap, (-newest._seq, newest))
                    newest, newest_grad = x, gx
                else:
                    grads[x] = gx
                    push(heap, (-x._seq, x))
            if newest is not None:
                if not heap or newest._seq > -heap[0][0]:
                    t, g = newest, newest_grad
                    continue  # what the heap would pop next anyway
                grads[newest] = newest_grad
                push(heap, (-newest._seq, newest))
        if not heap:
            return
        t = pop(heap)[1]
        g = grads.pop(t)


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
    leaf_grad = _new_tensor(Tensor)
    leaf_grad.data, leaf_grad._op, leaf_grad.requires_grad, leaf_grad.grad = g, None, False, None
    leaf_grad._seq = next(_SEQUENCE)
    t.grad = leaf_grad


_SEQUENCE = itertools.count()
_new_tensor = object.__new__
_ndarray = np.ndarray
_CPU_ARRAYS = (np.ndarray, np.generic)  # a full reduction gives a NumPy scalar
_NEEDS_ONE = (True,)
ops.EAGER_ENGINE = apply_eager


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
