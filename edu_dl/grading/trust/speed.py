"""A speed run's output (one ``.npy`` a sandbox wrote), read strictly: version 1.0 or 2.0
header, no objects, no pickles, the expected dtype and shape exactly, bytes that match."""

from __future__ import annotations

import ast
import io

import numpy as np

from edu_dl.grading.trust.notebook import Untrusted
from edu_dl.grading.trust.scopes import parse_python

MAX_OUTPUT_BYTES = 64 << 20


def read_speed_outputs(data: bytes, size: int, shape: tuple[int, ...],
                 dtype: np.dtype[np.generic] | type = np.float32,
                 limit: int = MAX_OUTPUT_BYTES) -> np.ndarray:
    """The array in ``data`` (``size``: the bytes the sandbox wrote, maybe more than it kept),
    which must have ``shape`` and ``dtype``; Untrusted if anything else."""
    if size > limit or size != len(data):
        raise Untrusted(f"the run's output is {size} bytes, over the limit of {limit}"
                        if size > limit else "the run's output was cut short")
    want = np.dtype(dtype)
    f = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(f)
        if version not in ((1, 0), (2, 0)):
            raise Untrusted(f"an .npy of version {version}")
        read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                       else np.lib.format.read_array_header_2_0)
        got_shape, fortran, got_dtype = read_header(f, max_header_size=1024)
    except Untrusted:
        raise
    except Exception as exc:
        raise Untrusted(f"not an .npy array ({type(exc).__name__})") from None
    if got_dtype != want or tuple(got_shape) != tuple(shape) or fortran:
        raise Untrusted(f"an array of {got_dtype} {tuple(got_shape)}, not {want} {tuple(shape)}")
    body = data[f.tell():]
    if len(body) != int(np.prod(shape, dtype=np.int64)) * want.itemsize:
        raise Untrusted("the array's bytes do not match its header")
    return np.frombuffer(body, dtype=want).reshape(shape)


MAX_SOURCE_CHARS = 100_000


def source_problem(source: str) -> str:
    """Why a submitted speed function may not be timed ("" when it may): it must use only the
    prelude's NumPy and math, so no import of its own and no dunder name (``__import__``,
    ``__builtins__``, ...) that could fetch one; parsed with ``ast``, never run."""
    if len(source) > MAX_SOURCE_CHARS:
        return f"the function's source is over {MAX_SOURCE_CHARS} characters"
    try:
        tree = parse_python(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "the function's source does not parse"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            return (f"line {node.lineno} imports a module: a speed task allows NumPy (np) and "
                    "math only, imported for you")
        name = node.id if isinstance(node, ast.Name) else (
            node.attr if isinstance(node, ast.Attribute) else "")
        if name.startswith("__") and name.endswith("__"):
            return f"line {getattr(node, 'lineno', '?')} uses {name}, which a speed task refuses"
    return ""
