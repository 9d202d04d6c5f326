"""Python's operators and the array methods, written once for the eager Tensor and the graph Node.

Each one is ``SomeOp.apply(...)``: the op meets the engine of its operands there (``Op.apply``),
so ``a * b`` runs now on Tensors and adds a node to a graph on Nodes.
"""

from __future__ import annotations

from typing import Any

from edu_dl.autograd import ops

Axis = int | tuple[int, ...] | None


class Operators:
    """``+ - * / @ ** []`` and ``exp``, ``sum``, ``reshape``… for any class that runs ops."""

    __slots__ = ()
    # NumPy must hand `ndarray + x` to x.__radd__ instead of looping over the array's elements.
    __array_ufunc__ = None

    @staticmethod
    def _apply_op(op_cls: type[ops.Op], inputs: tuple[Any, ...], attrs: dict[str, Any]) -> Any:
        """How this class's engine runs an op (``Op.apply`` calls it): Tensor runs it now,
        Node adds it to a graph."""
        raise NotImplementedError

    def _index_value(self) -> Any:
        """This operand's value when it is used as an index, as in ``x[i]``."""
        raise TypeError(f"{type(self).__name__} cannot be used as an index")

    # ------------------------------------------------------------------ operators
    def __add__(self, other: Any) -> Any:
        return ops.Add.apply(self, other)

    def __radd__(self, other: Any) -> Any:
        return ops.Add.apply(other, self)

    def __sub__(self, other: Any) -> Any:
        return ops.Sub.apply(self, other)

    def __rsub__(self, other: Any) -> Any:
        return ops.Sub.apply(other, self)

    def __mul__(self, other: Any) -> Any:
        return ops.Mul.apply(self, other)

    def __rmul__(self, other: Any) -> Any:
        return ops.Mul.apply(other, self)

    def __truediv__(self, other: Any) -> Any:
        return ops.Div.apply(self, other)

    def __rtruediv__(self, other: Any) -> Any:
        return ops.Div.apply(other, self)

    def __neg__(self) -> Any:
        return ops.Neg.apply(self)

    def __pow__(self, exponent: float) -> Any:
        return ops.Pow.apply(self, exponent=exponent)

    def __matmul__(self, other: Any) -> Any:
        return ops.MatMul.apply(self, other)

    def __rmatmul__(self, other: Any) -> Any:
        return ops.MatMul.apply(other, self)

    def __getitem__(self, index: Any) -> Any:
        # Indices may hold Tensors (as PyTorch allows); the op sees raw arrays.
        if isinstance(index, Operators):
            index = index._index_value()
        elif isinstance(index, tuple):
            index = tuple(i._index_value() if isinstance(i, Operators) else i for i in index)
        return ops.GetItem.apply(self, index=index)

    # ------------------------------------------------------------------ methods
    def matmul(self, other: Any) -> Any:
        return ops.MatMul.apply(self, other)

    def maximum(self, other: Any) -> Any:
        return ops.Maximum.apply(self, other)

    def exp(self) -> Any:
        return ops.Exp.apply(self)

    def log(self) -> Any:
        return ops.Log.apply(self)

    def sqrt(self) -> Any:
        return ops.Sqrt.apply(self)

    def tanh(self) -> Any:
        return ops.Tanh.apply(self)

    def sigmoid(self) -> Any:
        return ops.Sigmoid.apply(self)

    def relu(self) -> Any:
        return ops.ReLU.apply(self)

    def sum(self, axis: Axis = None, keepdims: bool = False) -> Any:
        return ops.Sum.apply(self, axis=axis, keepdims=keepdims)

    def mean(self, axis: Axis = None, keepdims: bool = False) -> Any:
        return ops.Mean.apply(self, axis=axis, keepdims=keepdims)

    def max(self, axis: Axis = None, keepdims: bool = False) -> Any:
        return ops.Max.apply(self, axis=axis, keepdims=keepdims)

    def reshape(self, *shape: Any) -> Any:
        if len(shape) == 1 and isinstance(shape[0], tuple | list):
            shape = tuple(shape[0])
        return ops.Reshape.apply(self, shape=shape)

    def transpose(self, *axes: Any) -> Any:
        if len(axes) == 1 and isinstance(axes[0], tuple | list):
            axes = tuple(axes[0])
        return ops.Transpose.apply(self, axes=axes or None)

    @property
    def T(self) -> Any:
        return self.transpose()

    def broadcast_to(self, shape: tuple[int, ...]) -> Any:
        return ops.BroadcastTo.apply(self, shape=tuple(shape))
