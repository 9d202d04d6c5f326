"""A notebook a student or a sandbox wrote, parsed as data, strictly and within bounds.

- :func:`parse_notebook`: a submitted notebook. Before any JSON is parsed, one pass over the
  bytes (:func:`json_cost`) counts its values and nesting depth, and a notebook over
  :data:`MAX_VALUES` or :data:`MAX_DEPTH` is refused unparsed (:class:`TooLarge`): 16 MB of
  ``[]`` once cost the grader 823 MB and minutes in ``json.loads`` alone. Then, before nbformat
  sees it, a notebook of more than :data:`MAX_CELLS` cells is refused, and all metadata but
  nbgrader's and the kernelspec is dropped (nothing the grader does reads the rest). Every cell
  must be a cell: a type, a text source, a metadata object. What the grader keeps of a
  submission is its cells' sources and nbgrader metadata (``restore``).
- :func:`executed_cells`: the notebook the sandbox returns after running. It was written by
  the student's process, so only its outputs and execution counts are taken, each checked
  against nbformat's schema (a count: a bounded non-negative int or None) and the outputs
  reduced to plain text, PNG/JPEG images and errors; its cells must line up with the
  notebook that was run, whose sources (not the returned ones) are what the instructor sees.
- :func:`compact_bytes`: how the grader writes what it built from student data: compact JSON,
  ASCII only (a lone surrogate is written as an escape), so its size stays within a small
  factor of what was read.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

import nbformat
import numpy as np
from nbformat import versions
from nbformat.reader import NotJSONError, get_version

from edu_dl.grading.notebooks import Notebook, NotebookError

MAX_DEPTH = 64  # nbformat itself needs about 8; widget states and plots a few more
# The course's largest notebook, executed with its outputs, holds about 1,600 JSON values and 62
# cells. 500,000 values parse in well under a second and 100 MB, whatever they are.
MAX_VALUES = 500_000
MAX_CELLS = 20_000  # of any kind; code cells have a tighter bound from the source (prepare)
KEPT_METADATA = ("nbgrader", "kernelspec")  # the notebook's; a cell keeps only "nbgrader"
# A JSON string, escapes included (the unrolled form: linear, no backtracking).
STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
CELL_TYPES = frozenset({"code", "markdown", "raw"})
# What the feedback shows of an output: text, pictures and errors. HTML, JavaScript, SVG and
# widget state are the student's markup and are never kept.
KEPT_DATA = ("text/plain", "image/png", "image/jpeg")
MAX_OUTPUTS = 200  # per cell
MAX_TEXT = 100_000  # characters of one text output
MAX_IMAGE = 4 << 20  # base64 characters of one image
MAX_TRACEBACK = 100  # lines
# A cell's execution count, as the feedback page shows it ("In [3]:"): the kernel counts one a
# cell, and a notebook has at most MAX_CELLS cells; this leaves room and bounds what is shown.
MAX_EXECUTION_COUNT = 1_000_000


def too_deep(obj: Any, limit: int = MAX_DEPTH) -> bool:
    """Does ``obj`` nest lists and objects deeper than ``limit``? (no recursion)"""
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else \
            value if isinstance(value, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


class TooLarge(NotebookError):
    """A notebook over one of the grader's own bounds (values, depth, cells): refused, not
    parsed further; the message names the file, the count and the bound."""


def json_cost(data: bytes, max_values: int | None = None) -> tuple[int, int]:
    """(values, depth) of the JSON in ``data``, counted without parsing it, exact for any text
    ``json.loads`` accepts: with strings and spaces taken out, every value but the first
    follows a comma or opens a non-empty container, and the depth is the running count of
    open brackets. C-speed passes, two copies of ``data`` at most; the depth is not counted
    (0) when there are more than ``max_values`` values."""
    bare = STRING.sub(b"0", data).translate(None, b" \t\n\r")
    opened = bare.count(b"[") + bare.count(b"{")
    values = 1 + bare.count(b",") + opened - bare.count(b"[]") - bare.count(b"{}")
    if max_values is not None and values > max_values:
        return values, 0
    return values, _depth(bare.translate(None, NOT_BRACKETS))


def _depth(brackets: bytes, chunk: int = 1 << 20) -> int:
    """The deepest nesting of a string of brackets, a chunk at a time (4 bytes a bracket)."""
    deepest = level = 0
    for start in range(0, len(brackets), chunk):
        b = np.frombuffer(brackets[start:start + chunk], np.uint8)
        running = level + np.cumsum((b == ord("[")) | (b == ord("{")), dtype=np.int64) \
            - np.cumsum((b == ord("]")) | (b == ord("}")), dtype=np.int64)
        deepest, level = max(deepest, int(running.max())), int(running[-1])
    return deepest


def load_json(data: bytes, name: str, max_depth: int = MAX_DEPTH,
              max_values: int = MAX_VALUES) -> Any:
    """JSON from bytes: strict UTF-8, at most ``max_values`` values no deeper than
    ``max_depth`` (counted before parsing: TooLarge); NotebookError otherwise."""
    values, depth = json_cost(data, max_values)
    if values > max_values:
        raise TooLarge(f"{name} holds {values:,} JSON values, over the grader's limit of "
                       f"{max_values:,} for one file; not parsed")
    if depth > max_depth:
        raise TooLarge(f"{name}: nested deeper than {max_depth} levels; not parsed")
    try:
        obj = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise NotebookError(f"{name}: not UTF-8 text (byte {exc.start})") from None
    except RecursionError:  # json_cost's depth is exact for valid JSON: never reached
        raise NotebookError(f"{name}: nested deeper than {max_depth} levels") from None
    except ValueError as exc:
        raise NotebookError(f"{name}: not JSON ({str(exc)[:200]})") from None
    return obj


def _cells(obj: Any) -> list[Any]:
    """The cells of a notebook's JSON, nbformat 4's or 3's (in worksheets); [] if none."""
    if not isinstance(obj, dict):
        return []
    if isinstance(obj.get("cells"), list):
        return obj["cells"]
    sheets = obj.get("worksheets")
    return [cell for sheet in sheets if isinstance(sheet, dict)
            and isinstance(sheet.get("cells"), list) for cell in sheet["cells"]] \
        if isinstance(sheets, list) else []


def trimmed(obj: Any, name: str, max_cells: int = MAX_CELLS) -> Any:
    """The notebook's JSON with what grading never reads taken out, in place: metadata but
    nbgrader's and the kernelspec (the notebook's) or nbgrader's (a cell's); TooLarge when it
    has more than ``max_cells`` cells."""
    cells = _cells(obj)
    if len(cells) > max_cells:
        raise TooLarge(f"{name} has {len(cells):,} cells, over the grader's limit of "
                       f"{max_cells:,} for one notebook; not parsed")
    for holder, kept in ((obj, KEPT_METADATA), *((cell, KEPT_METADATA[:1]) for cell in cells)):
        meta = holder.get("metadata") if isinstance(holder, dict) else None
        if isinstance(meta, dict):
            holder["metadata"] = {key: meta[key] for key in kept if key in meta}
    return obj


def parse_notebook(data: bytes, name: str) -> Notebook:
    """A submitted notebook as nbformat 4, every cell checked to be a cell; NotebookError
    (the message names the notebook and what is wrong) when it is not one, TooLarge when it
    is over the grader's bounds."""
    obj = trimmed(load_json(data, name), name)
    try:
        major, minor = get_version(obj)
        nb = nbformat.convert(versions[major].to_notebook_json(obj, minor=minor), 4)
        if major < 4:  # upgrading adds metadata of its own ("collapsed")
            nb = nbformat.from_dict(trimmed(nb, name))
    except (KeyError, AttributeError, TypeError, ValueError, NotJSONError) as exc:
        raise NotebookError(f"{name}: not a readable Jupyter notebook ({type(exc).__name__}: "
                            f"{str(exc)[:200]})") from None
    if not isinstance(nb.get("cells"), list) or not isinstance(nb.get("metadata"), dict):
        raise NotebookError(f"{name}: not a readable Jupyter notebook (no list of cells)")
    for index, cell in enumerate(nb.cells):
        problem = _cell_problem(cell)
        if problem:
            raise NotebookError(f"{name}: cell {index} {problem}")
    return nb


def _cell_problem(cell: Any) -> str:
    if not isinstance(cell, dict):
        return "is not a cell"
    if cell.get("cell_type") not in CELL_TYPES:
        return "has no cell type of code, markdown or raw"
    if not isinstance(cell.get("source", ""), str):
        return "has a source that is not text"
    if not isinstance(cell.get("metadata", {}), dict):
        return "has metadata that is not an object"
    return ""


def compact_bytes(nb: Any) -> bytes:
    """The notebook as compact, ASCII-only JSON (nbformat reads it as any other)."""
    return json.dumps(nb, separators=(",", ":"), ensure_ascii=True).encode("ascii")


# --------------------------------------------------------------------------- the executed notebook


class Untrusted(ValueError):
    """An executed notebook that is not what the runner writes; the message says why."""


def execution_count(value: Any) -> int | None:
    """An execution count as nbformat allows it and the grader shows it: an int from 0 to
    :data:`MAX_EXECUTION_COUNT`, else None."""
    if isinstance(value, int) and not isinstance(value, bool) and \
            0 <= value <= MAX_EXECUTION_COUNT:
        return value
    return None


def _count(value: Any, where: str) -> int | None:
    """An execution count the sandbox wrote: None, or an int :func:`execution_count` keeps;
    Untrusted otherwise."""
    if value is not None and execution_count(value) is None:
        raise Untrusted(f"{where}'s execution count is not a number from 0 to "
                        f"{MAX_EXECUTION_COUNT:,}")
    return value


def executed_outputs(data: bytes, ran: Notebook) -> list[list[dict[str, Any]]]:
    """The outputs of each cell of ``ran``, as :func:`executed_cells` takes them."""
    return executed_cells(data, ran)[1]


def executed_cells(data: bytes, ran: Notebook
                   ) -> tuple[list[int | None], list[list[dict[str, Any]]]]:
    """(execution counts, outputs) of each cell of ``ran`` (the notebook the sandbox ran),
    taken from the executed notebook it returned: the outputs checked, reduced to what the
    feedback shows, capped; the counts None (a Markdown cell, a cell not run) or an int
    from 0 to :data:`MAX_EXECUTION_COUNT`, which the feedback page shows as nbgrader's does.

    Untrusted when the returned notebook does not line up with ``ran`` cell for cell, or any
    output or count is not one nbformat allows: then none of it is used.
    """
    try:
        obj = load_json(data, "the executed notebook")
    except NotebookError as exc:
        raise Untrusted(str(exc)) from None
    cells = obj.get("cells") if isinstance(obj, dict) else None
    if not isinstance(cells, list) or len(cells) != len(ran.cells):
        raise Untrusted("its cells do not match the notebook that was run")
    found, counts = [], []
    for index, (cell, original) in enumerate(zip(cells, ran.cells)):
        if not isinstance(cell, dict) or cell.get("cell_type") != original.get("cell_type"):
            raise Untrusted(f"cell {index} is not the cell that was run")
        code = original.get("cell_type") == "code"
        outputs = cell.get("outputs", []) if code else []
        if not isinstance(outputs, list):
            raise Untrusted(f"cell {index}: its outputs are not a list")
        counts.append(_count(cell.get("execution_count"), f"cell {index}") if code else None)
        found.append([_output(o, index) for o in outputs[:MAX_OUTPUTS]])
    return counts, found


def _text(value: Any, where: str, cap: int = MAX_TEXT) -> str:
    """nbformat's multiline string: a string or a list of strings; capped."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        value = "".join(value)
    if not isinstance(value, str):
        raise Untrusted(f"{where} is not text")
    return value if len(value) <= cap else value[:cap] + f"\n[... {len(value) - cap} more " \
        "characters cut]"


def _output(output: Any, index: int) -> dict[str, Any]:
    where = f"cell {index}: an output"
    if not isinstance(output, dict):
        raise Untrusted(f"{where} is not an object")
    kind = output.get("output_type")
    if kind == "stream":
        name = output.get("name")
        if name not in ("stdout", "stderr"):
            raise Untrusted(f"{where} is a stream of neither stdout nor stderr")
        return nbformat.v4.new_output("stream", name=name, text=_text(output.get("text"), where))
    if kind == "error":
        traceback = output.get("traceback", [])
        if not isinstance(traceback, list):
            raise Untrusted(f"{where}'s traceback is not a list")
        return nbformat.v4.new_output(
            "error", ename=_text(output.get("ename"), where, 1000),
            evalue=_text(output.get("evalue"), where),
            traceback=[_text(line, where, 10_000) for line in traceback[:MAX_TRACEBACK]])
    if kind in ("execute_result", "display_data"):
        bundle = output.get("data", {})
        if not isinstance(bundle, dict):
            raise Untrusted(f"{where}'s data is not an object")
        data = {mime: _data(mime, bundle[mime], where) for mime in KEPT_DATA if mime in bundle}
        if kind == "display_data":
            return nbformat.v4.new_output("display_data", data=data)
        count = _count(output.get("execution_count"), where)
        return nbformat.v4.new_output("execute_result", data=data, execution_count=count)
    raise Untrusted(f"{where} has the unknown type {str(kind)[:40]!r}")


def _data(mime: str, value: Any, where: str) -> str:
    if mime == "text/plain":
        return _text(value, where)
    text = _text(value, where, MAX_IMAGE)
    try:
        base64.b64decode(text, validate=False)
    except (binascii.Error, ValueError):
        raise Untrusted(f"{where}: its {mime} is not base64") from None
    return text.replace("\n", "")
