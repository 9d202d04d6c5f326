"""Every primitive op, written once: a forward on raw arrays and a vector-Jacobian product (VJP).

The eager engine (``tensor.py``) and the static graph (``graph.py``) both run these classes, on
NumPy or CuPy alike: ``forward(xp, *arrays)`` gets the array namespace ``xp`` and never names a
library. ``backward(grad)`` returns one VJP per input, in input order, or ``None`` for an input
whose gradient nobody asked for (``self.needs[i]`` is False), and only for such an input.

``SomeOp.apply(*inputs, **attrs)`` is how an op meets an engine: it asks the first input that
has one (a Tensor, or a static-graph Node) to run or record the op. This file imports neither
engine. Adding an op means adding one class and one lowercase function to this file.
"""

from __future__ import annotations

import builtins
import numbers
from types import ModuleType
from typing import Any, ClassVar

from edu_dl.backend import constant, get_xp, scatter_add

Array = Any  # a NumPy or CuPy ndarray
Shape = tuple[int, ...]

# Marks an op whose saved arrays were freed by a backward pass without retain_graph=True.
FREED: Any = object()


def unbroadcast(grad: Array, shape: Shape) -> Array:
    """Sum ``grad`` down to ``shape``: the VJP of NumPy broadcasting, shared by every op."""
    if grad.shape == shape:
        return grad
    lead = grad.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, n in enumerate(shape) if n == 1 and grad.shape[lead + i] != 1
    )
    return grad.sum(axis=axes).reshape(shape)


def _normalize_axis(axis: int | tuple[int, ...] | None, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    n = ndim or 1  # NumPy accepts axis 0 (or -1) on a 0-d array
    out = []
    for a in axes:
        if not -n <= a < n:
            raise ValueError(f"axis {a} is out of bounds for an array of dimension {ndim}")
        out.append(a % n)
    return tuple(sorted(out))


class Op:
    """One primitive: ``forward`` saves what ``backward`` needs in ``self.saved``."""

    # Input i needs a gradient; set by the engine before backward runs.
    needs: tuple[bool, ...] = ()
    saved: Any = None
    inputs: tuple[Any, ...] = ()
    # Same inputs, same output: a static graph may fold it when its inputs are constants.
    pure: ClassVar[bool] = True

    # No __init__ here: ops without attributes take none (object's own, fast, constructor
    # rejects any), and ops with attributes define theirs.

    # The user-facing name in error messages: the lowercase function that applies the op.
    name: ClassVar[str] = "op"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            cls.name = cls.__name__.lower()

    def forward(self, xp: ModuleType, *arrays: Array) -> Array:
        raise NotImplementedError

    def backward(self, grad: Array) -> tuple[Array | None, ...]:
        raise NotImplementedError(f"{self.name} has no gradient")

    @classmethod
    def apply(cls, *inputs: Any, **attrs: Any) -> Any:
        """Run eagerly on Tensors (with arrays and numbers), or add a node to a static graph.

        The engine is the first input's that has one (``Operators._apply_op``): Tensors and
        Nodes carry theirs, so this file needs neither engine.
        """
        try:  # the usual case, without a loop: the first input is a Tensor or a Node
            engine = inputs[0]._apply_op
        except AttributeError:  # a number or an array first, as in 2 * x
            for x in inputs[1:]:
                engine = getattr(x, "_apply_op", None)
                if engine is not None:
                    break
            else:
                kinds = ", ".join(type(x).__name__ for x in inputs)
                raise TypeError(f"{cls.name}: needs a Tensor or a graph node among its inputs, "
                                f"got {kinds}; make one with edu_dl.tensor(...)") from None
        return engine(cls, inputs, attrs)


# --------------------------------------------------------------------------- elementwise


class Add(Op):
    """z = x + y"""

    def forward(self, xp, x, y):
        self.saved = (x.shape, y.shape)
        return x + y

    def backward(self, grad):
        xs, ys = self.saved
        gx = unbroadcast(grad, xs) if self.needs[0] else None
        gy = unbroadcast(grad, ys) if self.needs[1] else None
        if gx is gy is not None:
            gy = gy.copy()  # two leaves must not share one .grad buffer
        return gx, gy


class Sub(Op):
    """z = x - y"""

    def forward(self, xp, x, y):
        self.saved = (x.shape, y.shape)
        return x - y

    def backward(self, grad):
        xs, ys = self.saved
        return (unbroadcast(grad, xs) if self.needs[0] else None,
                unbroadcast(-grad, ys) if self.needs[1] else None)


class Mul(Op):
    """z = x * y"""

    def forward(self, xp, x, y):
        self.saved = (x, y)
        return x * y

    def backward(self, grad):
        x, y = self.saved
        gx = unbroadcast(grad * y, x.shape) if self.needs[0] else None
        gy = unbroadcast(grad * x, y.shape) if self.needs[1] else None
        return gx, gy


class Div(Op):
    """z = x / y"""

    def forward(self, xp, x, y):
        self.saved = (x, y)
        return x / y

    def backward(self, grad):
        x, y = self.saved
        gx = unbroadcast(grad / y, x.shape) if self.needs[0] else None
        gy = unbroadcast(-grad * x / (y * y), y.shape) if self.needs[1] else None
        return gx, gy


class Neg(Op):
    """z = -x"""

    def forward(self, xp, x):
        return -x

    def backward(self, grad):
        return (-grad,)


class Pow(Op):
    """z = x ** p for a constant scalar exponent p"""

    exponent: int | float

    def __init__(self, exponent: float) -> None:
        if exponent.__class__ is int or exponent.__class__ is float:  # the common case, fast
            self.exponent = exponent
            return
        if not isinstance(exponent, numbers.Real):
            raise TypeError(
                f"pow: the exponent must be a Python number, got {type(exponent).__name__}"
            )
        # A Python number, so a NumPy float64 exponent cannot upcast a float32 tensor.
        self.exponent = int(exponent) if isinstance(exponent, numbers.Integral) else float(exponent)

    def forward(self, xp, x):
        self.saved = x
        p = self.exponent
        return x * x if p == 2 else x**p

    def backward(self, grad):
        x, p = self.saved, self.exponent
        if p == 2:
            g = grad * x
            g += g  # 2 * grad * x, exactly, in one pass less
            return (g,)
        return (grad * p * x ** (p - 1),)


class Exp(Op):
    """z = e^x"""

    def forward(self, xp, x):
        out = xp.exp(x)
        self.saved = out
        return out

    def backward(self, grad):
        return (grad * self.saved,)


class Log(Op):
    """z = ln x"""

    def forward(self, xp, x):
        self.saved = x
        return xp.log(x)

    def backward(self, grad):
        return (grad / self.saved,)


class Sqrt(Op):
    """z = sqrt(x)"""

    def forward(self, xp, x):
        out = xp.sqrt(x)
        self.saved = out
        return out

    def backward(self, grad):
        return (grad / (2 * self.saved),)


class Tanh(Op):
    """z = tanh x;  dz/dx = 1 - z^2"""

    def forward(self, xp, x):
        out = xp.tanh(x)
        self.saved = out
        return out

    def backward(self, grad):
        out = self.saved
        return (grad * (1 - out * out),)


class Sigmoid(Op):
    """z = 1 / (1 + e^-x);  dz/dx = z (1 - z)"""

    def forward(self, xp, x):
        # tanh form: never overflows, unlike 1 / (1 + exp(-x)) for very negative x.
        out = 0.5 * (xp.tanh(0.5 * x) + 1)
        self.saved = out
        return out

    def backward(self, grad):
        out = self.saved
        return (grad * out * (1 - out),)


class ReLU(Op):
    """z = max(x, 0);  relu'(0) = 0, as in PyTorch"""

    def forward(self, xp, x):
        zero = constant(xp, 0, x.dtype)
        # The mask in x's dtype: multiplying by a bool array costs 3x more, in the cast.
        self.saved = (x > zero).astype(x.dtype)
        return xp.maximum(x, zero)

    def backward(self, grad):
        return (grad * self.saved,)


class Maximum(Op):
    """z = max(x, y) elementwise; a tie sends half the gradient to each side, as in PyTorch"""

    def forward(self, xp, x, y):
        self.saved = (x, y)
        return xp.maximum(x, y)

    def backward(self, grad):
        x, y = self.saved
        # x's share of grad: 1 where x > y, 1/2 where x == y, 0 elsewhere; y gets the rest.
        # (Masks made in grad's dtype: arithmetic on bool arrays pays for a cast each time.)
        xp, dtype = get_xp(grad), grad.dtype
        share = (x > y).astype(dtype)
        share += (x == y).astype(dtype) * constant(xp, 0.5, dtype)
        to_x = grad * share
        gx = unbroadcast(to_x, x.shape) if self.needs[0] else None
        # grad - grad * share is exact for shares of 1, 1/2 and 0.
        gy = unbroadcast(grad - to_x, y.shape) if self.needs[1] else None
        return gx, gy


# --------------------------------------------------------------------------- linear algebra


class MatMul(Op):
    """z = x @ y, with NumPy's rules for 1-D and batched operands"""

    def forward(self, xp, x, y):
        self.saved = (x, y)
        try:
            if x.ndim == 2 and y.ndim == 2:
                # The same product as x @ y (one BLAS call), for half the call overhead:
                # 0.4 µs instead of 0.9 µs on an (8, 16) @ (16, 16) product.
                return x.dot(y)
            return x @ y
        except ValueError:  # explained after the fact: checking first would slow every call
            raise ValueError(_matmul_mismatch(x, y)) from None

    def backward(self, grad):
        x, y = self.saved
        if x.ndim == 2 and y.ndim == 2:  # the common case, without the general machinery
            return (grad.dot(y.T) if self.needs[0] else None,
                    x.T.dot(grad) if self.needs[1] else None)
        # Lift 1-D operands to matrices so one formula serves every case.
        x2 = x[None, :] if x.ndim == 1 else x
        y2 = y[:, None] if y.ndim == 1 else y
        g2 = grad
        # y first: for 1-D @ 1-D the 0-d grad becomes (1,) and then (1, 1).
        if y.ndim == 1:
            g2 = g2[..., None]
        if x.ndim == 1:
            g2 = g2[..., None, :]
        gx = gy = None
        if self.needs[0]:
            gx = unbroadcast(g2 @ y2.swapaxes(-1, -2), x2.shape).reshape(x.shape)
        if self.needs[1]:
            gy = unbroadcast(x2.swapaxes(-1, -2) @ g2, y2.shape).reshape(y.shape)
        return gx, gy


def _matmul_mismatch(x: Array, y: Array) -> str:
    if x.ndim == 0 or y.ndim == 0:
        return "matmul does not take scalars; use * instead"
    kx = x.shape[-1]
    ky = y.shape[-2] if y.ndim > 1 else y.shape[0]
    if kx != ky:
        return (f"matmul: shapes {tuple(x.shape)} and {tuple(y.shape)} are not aligned: "
                f"{kx} (last dim of the first) != {ky} (first dim of the second's matrix)")
    return (f"matmul: shapes {tuple(x.shape)} and {tuple(y.shape)} have batch dimensions "
            f"that do not broadcast")


# --------------------------------------------------------------------------- convolution
# Layout NCHW, weights (out_channels, in_channels, kh, kw): PyTorch's and Caffe's. A window view
# (sliding_window_view, in NumPy and CuPy alike) gives every kernel-sized patch without a copy;
# conv2d copies the patches into a matrix (im2col) and runs one matmul, and both ops send
# gradients back through col2im: a loop over the kh*kw kernel offsets, each adding one strided
# slice (np.add.at would do it element by element, many times slower).

Pair = tuple[int, int]


def _pair(value: Any, what: str, op: str) -> Pair:
    """``value`` as (height, width): one integer for both, or two."""
    items = (value, value) if isinstance(value, numbers.Integral) else tuple(value)
    if len(items) != 2 or not all(isinstance(v, numbers.Integral) for v in items):
        raise TypeError(f"{op}: {what} must be an integer or a pair of integers, got {value!r}")
    return int(items[0]), int(items[1])


def _out_size(size: int, kernel: int, stride: int, pad: int, ceil_mode: bool = False) -> int:
    """How many windows fit along one axis (PyTorch's formula, and Caffe's in ceil mode)."""
    span = size + 2 * pad - kernel
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    # The last window must start inside the input or its left padding, never in the right one.
    return out - 1 if (out - 1) * stride >= size + pad else out


def _windows(xp: ModuleType, x: Array, kernel: Pair, stride: Pair, out: Pair) -> Array:
    """The (N, C, OH, OW, kh, kw) view of the windows of a padded ``x``: no copy."""
    view = xp.lib.stride_tricks.sliding_window_view(x, kernel, axis=(2, 3))
    return view[:, :, : stride[0] * (out[0] - 1) + 1 : stride[0],
                : stride[1] * (out[1] - 1) + 1 : stride[1]]


def _col2im(xp: ModuleType, cols: Array, padded: Shape, stride: Pair) -> Array:
    """The VJP of ``_windows``: each window's gradient (N, C, OH, OW, kh, kw) added back where
    the window was read, into an array of the padded input's shape (overlaps add up)."""
    _, _, oh, ow, kh, kw = cols.shape
    sh, sw = stride
    out = xp.zeros(padded, dtype=cols.dtype)
    for i in range(kh):
        for j in range(kw):
            out[:, :, i : i + sh * (oh - 1) + 1 : sh, j : j + sw * (ow - 1) + 1 : sw] += (
                cols[:, :, :, :, i, j])
    return out


def _unpad(x: Array, pad: Pair, shape: Shape) -> Array:
    ph, pw = pad
    return x[:, :, ph : ph + shape[2], pw : pw + shape[3]]


def _check_image(op: str, x: Array) -> None:
    if x.ndim != 4:
        raise ValueError(f"{op}: expected an input of shape (N, C, H, W), got shape "
                         f"{tuple(x.shape)}")


def _check_geometry(op: str, x: Array, kernel: Pair, pad: Pair, out: Pair) -> None:
    if out[0] < 1 or out[1] < 1:
        h, w = x.shape[2] + 2 * pad[0], x.shape[3] + 2 * pad[1]
        raise ValueError(f"{op}: a {kernel[0]}x{kernel[1]} kernel does not fit in the input of "
                         f"shape {tuple(x.shape)} padded by {pad} ({h}x{w} after padding)")


class Conv2d(Op):
    """z[n, o] = sum over c, i, j of x_pad[n, c, s*h + i, s*w + j] * weight[o, c, i, j] (+ bias[o])

    The cross-correlation every framework calls convolution, as im2col: the windows of x become
    the columns of a matrix X_col of shape (C*kh*kw, N*OH*OW), and z = W @ X_col with W the weight
    as a (out_channels, C*kh*kw) matrix (Caffe's and CS231n's layout). Its VJPs are a matmul's,
    then col2im for x.
    """

    def __init__(self, stride: Any = 1, padding: Any = 0) -> None:
        self.stride = _pair(stride, "stride", "conv2d")
        self.padding = _pair(padding, "padding", "conv2d")
        if min(self.stride) < 1 or min(self.padding) < 0:
            raise ValueError(f"conv2d: stride must be positive and padding not negative, got "
                             f"stride {self.stride} and padding {self.padding}")

    def forward(self, xp, x, weight, bias=None):
        _check_image("conv2d", x)
        if weight.ndim != 4 or min(weight.shape[2:]) < 1:
            raise ValueError(f"conv2d: expected a weight of shape (out_channels, in_channels, kh, "
                             f"kw), got shape {tuple(weight.shape)}")
        n, c, h, w = x.shape
        o, c_w, kh, kw = weight.shape
        if c != c_w:
            raise ValueError(f"conv2d: the input of shape {tuple(x.shape)} has {c} channels but "
                             f"the weight of shape {tuple(weight.shape)} expects {c_w}")
        if bias is not None and bias.shape != (o,):
            raise ValueError(f"conv2d: expected a bias of shape ({o},) for the weight of shape "
                             f"{tuple(weight.shape)}, got shape {tuple(bias.shape)}")
        (sh, sw), (ph, pw) = self.stride, self.padding
        out = (_out_size(h, kh, sh, ph), _out_size(w, kw, sw, pw))
        _check_geometry("conv2d", x, (kh, kw), self.padding, out)
        padded = xp.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw))) if ph or pw else x
        windows = _windows(xp, padded, (kh, kw), self.stride, out)
        # im2col: one column per output pixel, (n, oh, ow) in order. The reshape copies, in runs
        # of OW neighbours: 2.4-5.7x faster here than one row per pixel, in runs kw long.
        cols = windows.transpose(1, 4, 5, 0, 2, 3).reshape(c * kh * kw, n * out[0] * out[1])
        z = weight.reshape(o, c * kh * kw) @ cols
        if bias is not None:
            z = z + bias[:, None]  # not +=: a float64 bias must promote a float32 z, as NumPy
        self.saved = (cols, weight, x.shape, padded.shape, xp)
        # (O, N*OH*OW) viewed as NCHW without a copy; the gradient comes back in this layout.
        return z.reshape(o, n, out[0], out[1]).transpose(1, 0, 2, 3)

    def backward(self, grad):
        cols, weight, x_shape, padded_shape, xp = self.saved
        n, o, oh, ow = grad.shape
        g = grad.transpose(1, 0, 2, 3).reshape(o, n * oh * ow)  # z's matrix layout again
        gw = (g @ cols.T).reshape(weight.shape) if self.needs[1] else None
        gb = g.sum(axis=1) if len(self.needs) > 2 and self.needs[2] else None
        gx = None
        if self.needs[0]:
            c, kh, kw = weight.shape[1:]
            d_cols = (weight.reshape(o, -1).T @ g).reshape(c, kh, kw, n, oh, ow)
            d_pad = _col2im(xp, d_cols.transpose(3, 0, 4, 5, 1, 2), padded_shape, self.stride)
            gx = _unpad(d_pad, self.padding, x_shape)
        return (gx, gw) if len(self.needs) == 2 else (gx, gw, gb)


class MaxPool2d(Op):
    """z[n, c, h, w] = max of the window of x_pad at (s*h, s*w); padding never wins

    The gradient goes to the first maximum of each window (row by row), as in PyTorch and Caffe.
    """

    name = "max_pool2d"

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0,
                 ceil_mode: bool = False) -> None:
        self.kernel = _pair(kernel_size, "kernel_size", self.name)
        self.stride = self.kernel if stride is None else _pair(stride, "stride", self.name)
        self.padding = _pair(padding, "padding", self.name)
        self.ceil_mode = bool(ceil_mode)
        if min(self.kernel) < 1 or min(self.stride) < 1:
            raise ValueError(f"max_pool2d: kernel_size and stride must be positive, got "
                             f"{self.kernel} and {self.stride}")
        # Caffe's rule: then every window holds at least one input value.
        if not all(0 <= p < k for p, k in zip(self.padding, self.kernel)):
            raise ValueError(f"max_pool2d: padding must lie in [0, kernel_size), got padding "
                             f"{self.padding} for kernel_size {self.kernel}")

    def forward(self, xp, x):
        _check_image(self.name, x)
        n, c, h, w = x.shape
        (kh, kw), (sh, sw), (ph, pw) = self.kernel, self.stride, self.padding
        out = (_out_size(h, kh, sh, ph, self.ceil_mode), _out_size(w, kw, sw, pw, self.ceil_mode))
        _check_geometry(self.name, x, self.kernel, self.padding, out)
        # Ceil mode's last window may reach past the padding: pad that part too. (builtins.max:
        # this module's own max is the op.)
        extra_h = builtins.max((out[0] - 1) * sh + kh - h - 2 * ph, 0)
        extra_w = builtins.max((out[1] - 1) * sw + kw - w - 2 * pw, 0)
        padded = x
        if ph or pw or extra_h or extra_w:
            lowest = -xp.inf if x.dtype.kind == "f" else xp.iinfo(x.dtype).min
            padded = xp.pad(x, ((0, 0), (0, 0), (ph, ph + extra_h), (pw, pw + extra_w)),
                            constant_values=lowest)
        windows = _windows(xp, padded, self.kernel, self.stride, out)
        flat = windows.reshape(n, c, out[0], out[1], kh * kw)  # a copy, one row per window
        self.saved = (flat.argmax(axis=-1), x.shape, padded.shape, xp)
        return flat.max(axis=-1)

    def backward(self, grad):
        first_max, x_shape, padded_shape, xp = self.saved
        kh, kw = self.kernel
        hit = first_max[..., None] == xp.arange(kh * kw)
        d_windows = xp.where(hit, grad[..., None], constant(xp, 0, grad.dtype))
        d_pad = _col2im(xp, d_windows.reshape(*grad.shape, kh, kw), padded_shape, self.stride)
        return (_unpad(d_pad, self.padding, x_shape),)


# --------------------------------------------------------------------------- reductions


class Sum(Op):
    """z = sum of x over axis"""

    def __init__(self, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> None:
        self.axis, self.keepdims = axis, keepdims

    def forward(self, xp, x):
        self.saved = (_reduction(self.axis, x.shape), xp)
        return x.sum(axis=self.axis, keepdims=self.keepdims)

    def backward(self, grad):
        (shape, _, _, kept_shape), xp = self.saved
        if not self.keepdims:
            grad = grad.reshape(kept_shape)
        return (_broadcast(xp, grad, shape),)


class Mean(Op):
    """z = mean of x over axis"""

    def __init__(self, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> None:
        self.axis, self.keepdims = axis, keepdims

    def forward(self, xp, x):
        plan = _reduction(self.axis, x.shape)
        self.saved = (plan, xp)
        # sum / count is what x.mean() computes, without its Python-level overhead.
        return x.sum(axis=self.axis, keepdims=self.keepdims) / plan[2]

    def backward(self, grad):
        (shape, _, count, kept_shape), xp = self.saved
        if not self.keepdims:
            grad = grad.reshape(kept_shape)
        return (_broadcast(xp, grad / constant(xp, count, grad.dtype), shape),)


Reduction = tuple[Shape, tuple[int, ...], int, Shape]  # shape, axes, count, kept_shape
_REDUCTIONS: dict[Any, Reduction] = {}


def _reduction(axis: int | tuple[int, ...] | None, shape: Shape) -> Reduction:
    """For reducing ``shape`` over ``axis``: the axes (normalized), how many elements each
    output averages, and the shape with those axes kept as 1s. Cached: a training loop asks
    the same question every step."""
    key = (axis, shape)
    try:
        return _REDUCTIONS[key]
    except KeyError:
        pass
    except TypeError:  # an unhashable axis (a list): work it out every time
        return _make_reduction(axis, shape)
    if len(_REDUCTIONS) >= 4096:
        _REDUCTIONS.clear()
    plan = _REDUCTIONS[key] = _make_reduction(axis, shape)
    return plan


def _make_reduction(axis: int | tuple[int, ...] | None, shape: Shape) -> Reduction:
    axes = _normalize_axis(axis, len(shape))
    count = 1
    for a in axes:
        count *= shape[a] if shape else 1
    kept = tuple(1 if i in axes else n for i, n in enumerate(shape))
    return tuple(shape), axes, count, kept


class Max(Op):
    """z = max of x over axis; ties share the gradient evenly, as torch.amax does"""

    def __init__(self, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> None:
        self.axis, self.keepdims = axis, keepdims

    def forward(self, xp, x):
        if x.size == 0:
            raise ValueError("max of an empty array has no value")
        out = x.max(axis=self.axis, keepdims=True)
        axes = _normalize_axis(self.axis, x.ndim)
        self.saved = (x, out, axes)
        return out if self.keepdims else out.reshape(_reduced_shape(x.shape, axes))

    def backward(self, grad):
        x, out, axes = self.saved
        if not self.keepdims:
            grad = _expand_reduced(grad, x.shape, axes)
        mask = x == out
        count = mask.sum(axis=axes, keepdims=True).astype(grad.dtype)
        return (grad * mask / count,)


def _broadcast(xp: ModuleType, grad: Array, shape: Shape) -> Array:
    """grad spread to ``shape`` as a real (writeable) array, not a read-only view."""
    out = xp.empty(shape, dtype=grad.dtype)
    out[...] = grad
    return out


def _reduced_shape(shape: Shape, axes: tuple[int, ...]) -> Shape:
    return tuple(n for i, n in enumerate(shape) if i not in axes)


def _expand_reduced(grad: Array, shape: Shape, axes: tuple[int, ...]) -> Array:
    """Put back the reduced axes as size-1 dims, so grad broadcasts against the input."""
    return grad.reshape(tuple(1 if i in axes else n for i, n in enumerate(shape)))


# --------------------------------------------------------------------------- shape


class Reshape(Op):
    """z = x viewed with a new shape"""

    def __init__(self, shape: Shape) -> None:
        self.shape = tuple(shape)

    def forward(self, xp, x):
        self.saved = x.shape
        return x.reshape(self.shape)

    def backward(self, grad):
        return (grad.reshape(self.saved),)


class Transpose(Op):
    """z = x with its axes permuted (reversed when axes is None)"""

    def __init__(self, axes: tuple[int, ...] | None = None) -> None:
        self.axes = None if axes is None else tuple(axes)

    def forward(self, xp, x):
        return x.transpose(self.axes)

    def backward(self, grad):
        if self.axes is None:
            return (grad.transpose(),)
        inverse = [0] * len(self.axes)
        for i, a in enumerate(self.axes):
            inverse[a % len(self.axes)] = i
        return (grad.transpose(inverse),)


class BroadcastTo(Op):
    """z = x broadcast to shape"""

    name = "broadcast_to"

    def __init__(self, shape: Shape) -> None:
        self.shape = tuple(shape)

    def forward(self, xp, x):
        self.saved = x.shape
        return xp.broadcast_to(x, self.shape)

    def backward(self, grad):
        return (unbroadcast(grad, self.saved),)


class GetItem(Op):
    """z = x[index], for basic and advanced NumPy indexing"""

    name = "getitem"

    def __init__(self, index: Any) -> None:
        self.index = index

    def forward(self, xp, x):
        self.saved = (x.shape, x.dtype, xp)
        return x[self.index]

    def backward(self, grad):
        shape, dtype, xp = self.saved
        out = xp.zeros(shape, dtype=grad.dtype if grad.dtype.kind == "f" else dtype)
        # add.at, not assignment: an index repeated k times receives k gradients.
        scatter_add(xp, out, self.index, grad)
        return (out,)


class ToDevice(Op):
    """z = x copied to another device; the gradient goes back to where x lives"""

    name = "to_device"

    pure = False  # its output lives on a device, not in the graph's constants

    def __init__(self, device: str) -> None:
        self.device = device

    def forward(self, xp, x):
        from edu_dl.backend import device_of, to_device

        self.saved = device_of(x)
        return to_device(x, self.device)

    def backward(self, grad):
        from edu_dl.backend import to_device

        return (to_device(grad, self.saved),)


class Softmax(Op):
    """z = exp(x - max(x)) / sum(exp(x - max(x))) along ``axis``: the max subtracted first so no
    exp overflows (an entry of -inf, a masked score, gets probability 0)"""

    def __init__(self, axis: int = -1) -> None:
        self.axis = axis

    def forward(self, xp, x):
        z = xp.exp(x - x.max(axis=self.axis, keepdims=True))
        z /= z.sum(axis=self.axis, keepdims=True)
        self.saved = z  # the VJP needs only the output
        return z

    def backward(self, grad):
        # J = diag(z) - z z^T along the axis, so J^T g = z * (g - <g, z>): no N x N Jacobian.
        z = self.saved
        return (z * (grad - (grad * z).sum(axis=self.axis, keepdims=True)),)


# --------------------------------------------------------------------------- losses


class SoftmaxCrossEntropy(Op):
    """Cross-entropy of softmax(logits) against integer labels, computed stably via logsumexp.

    loss_i = logsumexp(logits_i) - logits_i[y_i];  d loss_i / d logits_i = softmax_i - onehot(y_i)
    """

    name = "softmax_cross_entropy"

    def __init__(self, reduction: str = "mean") -> None:
        if reduction not in ("mean", "sum", "none"):
            raise ValueError(f"softmax_cross_entropy: reduction must be mean, sum or none, "
                             f"got {reduction!r}")
        self.reduction = reduction

    def forward(self, xp, logits, labels):
        if logits.ndim != 2 or labels.shape != (logits.shape[0],):
            raise ValueError(
                f"softmax_cross_entropy: expected logits of shape (N, C) and labels of shape "
                f"(N,), got {tuple(logits.shape)} and {tuple(labels.shape)}"
            )
        if labels.dtype.kind not in "iu":
            raise TypeError(f"softmax_cross_entropy: labels must be integers, got {labels.dtype}")
        n, c = logits.shape
        if n and (labels.min() < 0 or labels.max() >= c):
            raise ValueError(f"softmax_cross_entropy: labels must lie in [0, {c}), "
                             f"got values from {labels.min()} to {labels.max()}")
        shifted = logits - logits.max(axis=1, keepdims=True)
        log_z = xp.log(xp.exp(shifted).sum(axis=1, keepdims=True))
        log_probs = shifted - log_z
        rows = xp.arange(n)
        losses = -log_probs[rows, labels]
        self.saved = (log_probs, labels, rows)
        if self.reduction == "mean":
            return losses.mean()
        return losses.sum() if self.reduction == "sum" else losses

    def backward(self, grad):
        log_probs, labels, rows = self.saved
        xp = get_xp(log_probs)
        d = xp.exp(log_probs)
        d[rows, labels] -= 1
        if self.reduction == "mean":
            d *= grad / log_probs.shape[0]
        elif self.reduction == "sum":
            d *= grad
        else:
            d *= grad[:, None]
        return d, None


# --------------------------------------------------------------------------- the functions


def add(x: Any, y: Any) -> Any:
    """Elementwise x + y, broadcast as NumPy does."""
    return Add.apply(x, y)


def sub(x: Any, y: Any) -> Any:
    """Elementwise x - y, broadcast as NumPy does."""
    return Sub.apply(x, y)


def mul(x: Any, y: Any) -> Any:
    """Elementwise x * y, broadcast as NumPy does."""
    return Mul.apply(x, y)


def div(x: Any, y: Any) -> Any:
    """Elementwise x / y (true division), broadcast as NumPy does."""
    return Div.apply(x, y)


def neg(x: Any) -> Any:
    """Elementwise -x."""
    return Neg.apply(x)


def pow(x: Any, exponent: float) -> Any:
    """Elementwise x ** exponent for a constant real exponent (TypeError for anything else)."""
    return Pow.apply(x, exponent=exponent)


def exp(x: Any) -> Any:
    """Elementwise e ** x."""
    return Exp.apply(x)


def log(x: Any) -> Any:
    """Elementwise natural logarithm of x."""
    return Log.apply(x)


def sqrt(x: Any) -> Any:
    """Elementwise square root of x."""
    return Sqrt.apply(x)


def tanh(x: Any) -> Any:
    """Elementwise tanh(x)."""
    return Tanh.apply(x)


def sigmoid(x: Any) -> Any:
    """Elementwise 1 / (1 + exp(-x))."""
    return Sigmoid.apply(x)


def relu(x: Any) -> Any:
    """Elementwise max(x, 0); its derivative at 0 is 0, as in PyTorch."""
    return ReLU.apply(x)


def maximum(x: Any, y: Any) -> Any:
    """max(x, y) elementwise; ``maximum(x, 0)`` is the lecture's ``tf.maximum(x, 0)``."""
    return Maximum.apply(x, y)


def matmul(x: Any, y: Any) -> Any:
    """x @ y with NumPy's rules for 1-D and batched operands; ValueError naming both shapes when
    they do not align."""
    return MatMul.apply(x, y)


def conv2d(x: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0) -> Any:
    """2-D convolution of NCHW ``x`` with ``weight`` (out, in, kh, kw), as torch's F.conv2d."""
    inputs = (x, weight) if bias is None else (x, weight, bias)
    return Conv2d.apply(*inputs, stride=stride, padding=padding)


def max_pool2d(x: Any, kernel_size: Any, stride: Any = None, padding: Any = 0,
               ceil_mode: bool = False) -> Any:
    """Max over kernel_size windows of NCHW ``x`` (stride defaults to kernel_size), as torch's
    F.max_pool2d; ``ceil_mode=True`` counts windows as Caffe's Pooling layer does."""
    return MaxPool2d.apply(x, kernel_size=kernel_size, stride=stride, padding=padding,
                           ceil_mode=ceil_mode)


def sum(x: Any, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Any:
    """Sum of x over ``axis`` (all when None); ``keepdims`` keeps those axes, as size 1."""
    return Sum.apply(x, axis=axis, keepdims=keepdims)


def mean(x: Any, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Any:
    """Mean of x over ``axis`` (all when None); ``keepdims`` keeps those axes, as size 1."""
    return Mean.apply(x, axis=axis, keepdims=keepdims)


def max(x: Any, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Any:
    """Max of x over ``axis`` (all when None; ``keepdims`` as in sum); ties share the gradient
    evenly, as torch.amax does; ValueError for an empty x."""
    return Max.apply(x, axis=axis, keepdims=keepdims)


def reshape(x: Any, shape: Shape) -> Any:
    """x with a new ``shape`` (same elements in the same order, as NumPy's reshape)."""
    return Reshape.apply(x, shape=tuple(shape))


def transpose(x: Any, axes: tuple[int, ...] | None = None) -> Any:
    """x with its axes permuted by ``axes`` (reversed when None)."""
    return Transpose.apply(x, axes=axes)


def broadcast_to(x: Any, shape: Shape) -> Any:
    """x broadcast to ``shape`` by NumPy's rules; its gradient is summed back to x's shape."""
    return BroadcastTo.apply(x, shape=tuple(shape))


def softmax_cross_entropy(logits: Any, labels: Any, reduction: str = "mean") -> Any:
    """Mean (or sum, or per-row) cross-entropy of softmax(logits) with integer labels."""
    return SoftmaxCrossEntropy.apply(logits, labels, reduction=reduction)


def softmax(x: Any, axis: int = -1) -> Any:
    """Softmax along ``axis``, as torch's F.softmax(x, dim=axis)."""
    return Softmax.apply(x, axis=axis)
