"""The trust boundary (edu_dl/grading/trust/): what a student or a sandbox wrote is read strictly,
within bounds, and written out harmlessly."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
import pytest
from fixtures.tracebacks import HIDDEN_CELL, TRACEBACK_9, VISIBLE_9
from hypothesis import given
from hypothesis import strategies as st

from edu_dl.grading import nbgrader
from edu_dl.grading.authoring import parts
from edu_dl.grading.notebooks import NotebookError
from edu_dl.grading.stages import load
from edu_dl.grading.trust import notebook as tnb
from edu_dl.grading.trust import source as tsource
from edu_dl.grading.trust.errors import failing_line, raised_in_hidden
from edu_dl.grading.trust.result import RunRecord, parse_record
from edu_dl.grading.trust.text import for_markdown, for_terminal, visible

ROOT = Path(__file__).resolve().parents[2]

# --------------------------------------------------------------------------- text


def test_text_for_each_writer() -> None:
    assert visible("a\udcff\ud800b") == "a\\xff\\ud800b"
    assert visible("a\udcffb").encode("utf-8") == b"a\\xffb"
    assert for_terminal("\x1b]0;t\x07\x1b[2J ok\r\u202e\x00\x9b\n\t") == \
        "\\x1b]0;t\\x07\\x1b[2J ok\\x0d\\u202e\\x00\\x9b\n\t"
    assert for_markdown("<b>|</b>\nx") == "&lt;b&gt;\\|&lt;/b&gt;<br>x"
    assert for_terminal("李娜 ü ✓") == "李娜 ü ✓"  # ordinary text is left as it is


@given(st.text())
def test_any_string_encodes_after_visible(text: str) -> None:
    visible(text).encode("utf-8")
    shown = for_terminal(text)
    assert not any(ord(c) < 32 and c not in "\n\t" for c in shown)


# --------------------------------------------------------------------------- run records

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(), inner, max_size=4), max_leaves=20)


@given(st.dictionaries(st.sampled_from(["cells", "kernel", "message", "output_cut", "x"]),
                       JSON | st.lists(st.dictionaries(
                           st.sampled_from(["index", "grade_id", "status", "error", "stderr"]),
                           JSON), max_size=4)))
@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
def test_a_run_record_of_any_shape_reads_without_raising(raw: dict[str, object]) -> None:
    record = parse_record(raw)
    assert isinstance(record, RunRecord)
    assert all(isinstance(c.index, int) and isinstance(c.grade_id, str) for c in record.cells)


def test_a_run_record_keeps_only_the_runners_types() -> None:
    record = parse_record({"cells": [{"index": 3, "grade_id": "t", "status": "error",
                                      "error": "E" * 5000, "stderr": True},
                                     {"index": True, "grade_id": "u", "status": "ok"},
                                     {"index": 4, "grade_id": "v", "status": ["ok"]},
                                     {"index": 5, "grade_id": "w", "status": "passed"}],
                           "kernel": {"ok": 1}, "message": ["x"], "output_cut": "yes"})
    assert [(c.index, c.grade_id, c.status, len(c.error), c.stderr) for c in record.cells] == \
        [(3, "t", "error", 2000, True)]
    assert (record.kernel, record.message, record.output_cut) == ("", "", False)


def test_a_run_records_durations_are_finite_bounded_numbers() -> None:
    """The runner's word on where the time went (the cost report's, never a grade's): numbers
    in [0, a day]; anything else, NaN and infinity included, reads as 0."""
    cells = [{"index": i, "grade_id": "", "status": "ok", "seconds": s}
             for i, s in enumerate([0.5, 1.25, -3.0, float("nan"), "9", True, 1e9])]
    record = parse_record({"cells": cells, "kernel": "ok", "kernel_seconds": 0.75,
                           "gate_seconds": 2.5})
    assert (record.kernel_seconds, record.cells_seconds, record.gate_seconds) == (0.75, 1.75, 2.5)
    for lie in (float("inf"), float("nan"), -1.0, "0.5", [1.0], False, 86_401):
        assert parse_record({"kernel_seconds": lie}).kernel_seconds == 0.0, lie
        assert parse_record({"gate_seconds": lie}).gate_seconds == 0.0, lie


# --------------------------------------------------------------------------- notebooks


def test_json_nesting_is_bounded() -> None:
    assert not tnb.too_deep([[[]]], 3) and tnb.too_deep([[[[]]]], 3)
    deep = b"[" * 100_000 + b"]" * 100_000  # past Python's own recursion limit too
    with pytest.raises(NotebookError, match="nested deeper than 64"):
        tnb.load_json(deep, "x")
    with pytest.raises(NotebookError, match="not UTF-8"):
        tnb.load_json(b'{"a": "\xff"}', "x")


def values_and_depth(obj: object) -> tuple[int, int]:
    """The JSON value's values and nesting depth, counted the plain (recursive) way."""
    if not isinstance(obj, (dict, list)):
        return 1, 0
    inside = [values_and_depth(c) for c in (obj.values() if isinstance(obj, dict) else obj)]
    return 1 + sum(v for v, _ in inside), 1 + max((d for _, d in inside), default=0)


@pytest.mark.parametrize("text", ['0', '[]', '{}', '[[],[]]', '[ [ ] , { } ]', '[[[[]]]]',
                                  '{"a": [1, 2, {}], "b": "x,[{\\"\\\\", "c": []}',
                                  '{"[": "]]]", "k": [true, null, -1.5e3, "\\u005b"]}'])
def test_values_and_depth_are_counted_exactly_before_parsing(text: str) -> None:
    assert tnb.json_cost(text.encode()) == values_and_depth(json.loads(text))


def test_a_notebook_over_the_value_or_cell_bound_is_refused_unparsed() -> None:
    nb = json.loads(nbformat.writes(nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell("x = 1")])))
    nb["metadata"]["junk"] = [0] * 1000
    with pytest.raises(tnb.TooLarge, match=r"nb holds 1,0[0-9]{2} JSON values, over the "
                       r"grader's limit of 1,000 for one file; not parsed"):
        tnb.load_json(json.dumps(nb).encode(), "nb", max_values=1000)
    nb["metadata"]["junk"] = [[[[]]]]
    with pytest.raises(tnb.TooLarge, match="nb: nested deeper than 5 levels"):
        tnb.load_json(json.dumps(nb).encode(), "nb", max_depth=5)
    nb["cells"] *= 4
    with pytest.raises(tnb.TooLarge, match="nb has 4 cells, over the grader's limit of 3"):
        tnb.trimmed(nb, "nb", max_cells=3)


def test_metadata_grading_never_reads_is_dropped_before_nbformat_sees_it() -> None:
    cell = nbformat.v4.new_code_cell("x = 1")
    cell.metadata = {"nbgrader": {"grade_id": "a"}, "tags": ["skip-execution"],
                     "widgets": [[[]]] * 10}
    nb = nbformat.v4.new_notebook(cells=[cell, nbformat.v4.new_markdown_cell("# t")])
    nb.metadata = {"kernelspec": {"name": "python3", "display_name": "P"}, "nbgrader": {"x": 1},
                   "widgets": {"state": list(range(100))}}
    parsed = tnb.parse_notebook(nbformat.writes(nb).encode(), "nb")
    assert parsed.metadata == {"kernelspec": {"name": "python3", "display_name": "P"},
                               "nbgrader": {"x": 1}}
    assert parsed.cells[0].metadata == {"nbgrader": {"grade_id": "a"}}
    assert parsed.cells[1].metadata == {}
    old = nbformat.v3.new_notebook(worksheets=[nbformat.v3.new_worksheet(cells=[
        nbformat.v3.new_code_cell("y = 2", metadata={"collapsed": True, "nbgrader": {}})])])
    parsed = tnb.parse_notebook(nbformat.v3.writes_json(old).encode(), "old")
    assert parsed.cells[0].source == "y = 2" and parsed.cells[0].metadata == {"nbgrader": {}}


def test_a_submitted_notebook_must_be_made_of_cells() -> None:
    good = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    assert tnb.parse_notebook(nbformat.writes(good).encode(), "nb").cells[0].source == "x = 1"
    for broken, why in (({"cell_type": "code", "source": {"a": 1}, "metadata": {}}, "source"),
                        ({"cell_type": "picture", "source": "", "metadata": {}}, "cell type"),
                        ({"cell_type": "code", "source": "", "metadata": [1]},
                         "metadata|not a readable")):
        bad = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [broken]}
        with pytest.raises(NotebookError, match=why):
            tnb.parse_notebook(json.dumps(bad).encode(), "nb")


def ran() -> nbformat.NotebookNode:
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# t"),
                                           nbformat.v4.new_code_cell("print(1)")])


def executed(outputs: object, cells: list[object] | None = None) -> bytes:
    nb = json.loads(nbformat.writes(ran()))
    nb["cells"][1]["outputs"] = outputs
    if cells is not None:
        nb["cells"] = cells
    return json.dumps(nb).encode()


def test_only_checked_outputs_are_taken_from_the_executed_notebook() -> None:
    png = "iVBORw0KGgo="
    outputs = [{"output_type": "stream", "name": "stdout", "text": ["a", "b"]},
               {"output_type": "display_data", "metadata": {"x": 1},
                "data": {"text/html": "<script>x</script>", "image/png": png + "\n",
                         "text/plain": "fig"}},
               {"output_type": "error", "ename": "E", "evalue": "v", "traceback": ["t"]}]
    got = tnb.executed_outputs(executed(outputs), ran())
    assert got[0] == []
    assert got[1][0]["text"] == "ab"
    assert got[1][1]["data"] == {"text/plain": "fig", "image/png": png}  # no HTML kept
    assert got[1][2]["traceback"] == ["t"]
    nbformat.validate(nbformat.from_dict({**json.loads(nbformat.writes(ran())), "cells": [
        {**ran().cells[1], "outputs": got[1]}]}))


@pytest.mark.parametrize("outputs, cells, why", [
    ([{"output_type": "execute_result", "data": {"text/plain": [1, 2]}}], None, "not text"),
    ({}, None, "not a list"),
    ([{"output_type": "stream", "name": "stdin", "text": "x"}], None, "stdout"),
    ([{"output_type": "javascript"}], None, "unknown type"),
    ([{"output_type": "execute_result", "execution_count": "1", "data": {}}], None, "count"),
    ([], [], "do not match"),
    ([], [{"cell_type": "code"}, {"cell_type": "code"}], "not the cell that was run"),
])
def test_a_forged_executed_notebook_is_not_used(outputs: object, cells: list[object] | None,
                                                why: str) -> None:
    with pytest.raises(tnb.Untrusted, match=why):
        tnb.executed_outputs(executed(outputs, cells), ran())


def test_execution_counts_are_kept_from_the_executed_notebook() -> None:
    """The feedback page shows "In [2]:" as nbgrader's does: the counts come back with the
    outputs, each a small non-negative int or None."""
    nb = json.loads(executed([{"output_type": "execute_result", "execution_count": 2,
                               "data": {"text/plain": "1"}}]))
    nb["cells"][1]["execution_count"] = 2
    counts, outputs = tnb.executed_cells(json.dumps(nb).encode(), ran())
    assert counts == [None, 2] and outputs[1][0]["execution_count"] == 2
    nb["cells"][1]["execution_count"] = None  # a cell that never ran
    assert tnb.executed_cells(json.dumps(nb).encode(), ran())[0] == [None, None]
    for forged in (-1, True, "2", 2.0, 10**40, [2]):
        nb["cells"][1]["execution_count"] = forged
        with pytest.raises(tnb.Untrusted, match="cell 1's execution count"):
            tnb.executed_cells(json.dumps(nb).encode(), ran())
    assert [tnb.execution_count(v) for v in (0, 7, -1, True, "3", None, 10**7)] == \
        [0, 7, None, None, None, None, None]


def test_the_line_a_test_cell_raised_on_is_read_from_its_own_frame() -> None:
    assert failing_line(TRACEBACK_9, 3) == 3 and failing_line(TRACEBACK_9, None) == 3
    assert failing_line(TRACEBACK_9, 1) == 2  # cell In[1]'s frame (the function's)
    assert failing_line(TRACEBACK_9, 7) is None  # no frame of the cell that ran
    assert failing_line(["Input In [4], in <cell line: 2>()", "E: x"], 4) == 2  # IPython 8.0
    assert failing_line(["<ipython-input-4-0a1b2c> in <module>\n      1 x = 1\n----> 2 f()",
                         "E"], 4) == 2  # IPython 7
    for junk in (None, "----> 3", [3], ["----> 3 assert"], ["Traceback", "AssertionError"]):
        assert failing_line(junk, 3) is None
    assert raised_in_hidden(HIDDEN_CELL, TRACEBACK_9, 3)
    assert not raised_in_hidden(HIDDEN_CELL, VISIBLE_9, 3)  # the visible assert on line 1
    assert not raised_in_hidden("assert f(1) == 1\n\nassert f(-1) == 1", TRACEBACK_9, 3)
    assert nbgrader.hidden_lines(HIDDEN_CELL) == {2, 3, 4}
    assert nbgrader.hidden_lines("x\n### BEGIN HIDDEN TESTS\ny") == {2, 3}  # no END: to the end


def test_the_grader_writes_student_data_compactly() -> None:
    nb = ran()
    nb.metadata["x"] = "\udcff 李"
    data = tnb.compact_bytes(nb)
    data.decode("ascii")
    assert b"\n" not in data and json.loads(data)["metadata"]["x"] == "\udcff 李"


# --------------------------------------------------------------------------- cell sources


def notebook(*sources: str, test: str = 'check("hw.part", square)') -> nbformat.NotebookNode:
    cells = [nbformat.v4.new_code_cell(s) for s in sources]
    cells.append(nbformat.v4.new_code_cell(test, metadata={"nbgrader": {
        "grade": True, "grade_id": "t", "locked": True, "points": 1}}))
    return nbformat.v4.new_notebook(cells=cells)


def test_a_cell_that_only_calls_the_name_is_never_parsed(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    parsed: list[str] = []
    real = tsource.parse_cell
    monkeypatch.setattr(tsource, "parse_cell", lambda text: parsed.append(text) or real(text))
    nb = notebook("def square(n):\n    return n * n", "print(square(3), square (4))",
                  "y = [square(i) for i in range(3)]\n")
    assert tsource.find_source(nb, "hw.part") == "def square(n):\n    return n * n\n"
    assert [text[:10] for text in parsed] == ['check("hw.', "def square"]
    for binding in ("square = print", "import square", "def square(x): pass",
                    "from m import *", "async def \\\n  square(): pass", "y = square"):
        assert tsource.may_bind(binding, "square"), binding


def test_a_huge_cell_that_may_bind_the_name_is_not_parsed() -> None:
    huge = "if False:\n    names = [" + "square, " * 200_000 + "]"
    reader = tsource.SourceReader(notebook("def square(n):\n    return n * n", huge))
    assert reader.find("hw.part") is None
    assert f"code cell 2 holds {len(huge)} characters and may define square" in \
        reader.problems["hw.part"]
    assert 1 not in reader._parsed  # the huge cell was never parsed
    calls = tsource.SourceReader(notebook("def square(n):\n    return n * n",
                                          "x = [" + "square(1), " * 200_000 + "]"))
    assert calls.find("hw.part") == "def square(n):\n    return n * n\n"  # calls only


def test_no_cache_keeps_a_students_cells_across_submissions() -> None:
    assert not hasattr(tsource.parse_cell, "cache_info")
    reader = tsource.SourceReader(notebook("def square(n):\n    return n * n"))
    reader.find("hw.part")
    assert len(reader._parsed) == 2  # one reader per submission holds them


def counted_parse(real: Callable[..., Any]) -> tuple[Callable[..., Any], list[int]]:
    """``real`` slowed down (every other thread has time to arrive), and a list whose one item
    counts the most threads that were ever inside it at once."""
    import threading
    import time

    inside, most = [0], [0]
    count = threading.Lock()

    def slow_parse(*args: Any, **kwargs: Any) -> Any:
        with count:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.01)
        try:
            return real(*args, **kwargs)
        finally:
            with count:
                inside[0] -= 1

    return slow_parse, most


def at_once(readers: list[Callable[[], Any]], most: list[int]) -> int:
    """Run every reader on a thread of its own, all together; the most that parsed at once."""
    import threading

    threads = [threading.Thread(target=read) for read in readers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return most[0]


def test_threads_grading_at_once_parse_one_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch grades on a thread pool; CPython 3.11's parser fails one of two threads parsing at
    once now and then ("AST constructor recursion depth mismatch"), which made a grader error of
    an answer that parses. Every reader of a student's source (a cell, a part's definition, a
    speed function) parses through one lock."""
    import ast

    from edu_dl.grading.authoring import source as asource
    from edu_dl.grading.trust import speed

    slow_parse, most = counted_parse(ast.parse)
    monkeypatch.setattr(ast, "parse", slow_parse)
    readers = [lambda: tsource.parse_cell("def square(n):\n    return n * n"),
               lambda: asource.definition_node("def square(n):\n    return n * n"),
               lambda: speed.source_problem("def f(x):\n    return x + 1")] * 4
    assert at_once(readers, most) == 1, f"{most[0]} threads parsed at once"


def test_numpys_and_the_graders_parses_take_the_same_lock(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Libraries parse too: NumPy reads every ``.npy`` header (a result, a case) with
    ``ast.literal_eval``, in every grading thread. One of those beside another parse failed an
    honest control's notebook as a grader error; ``grade`` puts every parse of the process
    under the lock."""
    import ast
    import io

    import numpy as np

    from edu_dl.grading.term import batch
    from edu_dl.grading.trust import scopes

    # Not ast.parse, which may be the lock already (a test graded before in this process).
    slow_parse, most = counted_parse(scopes._INTERPRETERS_PARSE)
    monkeypatch.setattr(ast, "parse", ast.parse)  # whatever grade installs is undone after
    monkeypatch.setattr(scopes, "_INTERPRETERS_PARSE", slow_parse)
    with pytest.raises(batch.NothingToGrade):  # it installs the lock before anything else
        batch.grade(tmp_path / "none", tmp_path / "none", tmp_path / "out", progress=False)
    buffer = io.BytesIO()
    np.savez(buffer, a=np.arange(3), b=np.eye(2))
    saved = buffer.getvalue()

    def read_npz() -> None:
        with np.load(io.BytesIO(saved)) as npz:
            [npz[name] for name in npz.files]

    readers = [read_npz, lambda: ast.literal_eval("{'shape': (2, 2)}"),
               lambda: tsource.parse_cell("def square(n):\n    return n * n")] * 4
    assert at_once(readers, most) == 1, f"{most[0]} threads parsed at once"


def test_the_grader_parses_python_in_one_place() -> None:
    """The lock above holds only if nothing in the package calls ``ast.parse`` beside it."""
    package = ROOT / "edu_dl"
    callers = sorted(str(p.relative_to(ROOT)) for p in package.rglob("*.py")
                     if "ast.parse(" in p.read_text(encoding="utf-8")
                     and p.name != "scopes.py")
    assert callers == [], callers


# --------------------------------------------------------------------------- what travels


def test_a_pickled_call_carries_no_host_path() -> None:
    import pickle

    course = parts.course_parts(ROOT / "solutions")
    sent = {pid: load.pickled_call(part) for pid, part in course.items()}
    sent = {pid: data for pid, data in sent.items() if data is not None}
    assert len(sent) >= 20
    for pid, data in sent.items():
        assert str(ROOT).encode() not in data and b"parts/ex" not in data, pid
        call = pickle.loads(data)
        # the course's calls live in edu_dl.harness: sent by name, the sandbox imports them;
        # a part file's own would come by value, its code named after the part
        # (a harness's callable object, such as ex11's ExplainErrors, arrives as an equal copy)
        assert call == course[pid].call if call.__module__.startswith("edu_dl.") \
            else call.__code__.co_filename == f"<part {pid}>", pid


def test_a_call_defined_in_a_part_file_travels_by_value_without_its_path(tmp_path: Path
                                                                        ) -> None:
    import pickle

    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / "hw7.private.py").write_text(
        "from edu_dl.grading import Part\n\n"
        "def twice(fn, args):\n    return fn(*args) * 2\n\n"
        "PARTS = [Part(id='hw7.double', points=1, cases=lambda rng, hidden: [(1,)],\n"
        "              expected=lambda n: 2 * n, call=twice)]\n")
    part = parts.course_parts(tmp_path)["hw7.double"]
    data = load.pickled_call(part)
    assert data is not None and str(tmp_path).encode() not in data
    call = pickle.loads(data)
    assert call.__code__.co_filename == "<part hw7.double>" and call(lambda n: n, (3,)) == 6


@given(st.binary(max_size=300))
def test_a_submission_secret_of_any_bytes_is_one_token_or_nothing(data: bytes) -> None:
    import tempfile

    from edu_dl.grading.trust.files import SUBMISSION_SECRET, read_submission_secret

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / SUBMISSION_SECRET).write_bytes(data)
        got = read_submission_secret(Path(tmp))
    token = set(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")
    assert got is None or (got == data and set(got.rstrip(b"\r\n")) <= token)


def test_a_submission_secret_is_never_read_through_a_link_a_fifo_or_past_its_bound(
        tmp_path: Path) -> None:
    import os

    from edu_dl.grading.trust.files import SUBMISSION_SECRET, read_submission_secret

    folders = {name: tmp_path / name for name in ("good", "link", "fifo", "big", "markup",
                                                  "none")}
    for folder in folders.values():
        folder.mkdir()
    (folders["good"] / SUBMISSION_SECRET).write_bytes(b"0123abcdef\n")
    (tmp_path / "elsewhere").write_bytes(b"0123abcdef\n")
    os.symlink(tmp_path / "elsewhere", folders["link"] / SUBMISSION_SECRET)
    os.mkfifo(folders["fifo"] / SUBMISSION_SECRET)  # would block a plain open()
    (folders["big"] / SUBMISSION_SECRET).write_bytes(b"a" * 10_000)
    (folders["markup"] / SUBMISSION_SECRET).write_bytes(b"<script>alert(1)</script>")
    got = {name: read_submission_secret(folder) for name, folder in folders.items()}
    assert got == {"good": b"0123abcdef\n", "link": None, "fifo": None, "big": None,
                   "markup": None, "none": None}
