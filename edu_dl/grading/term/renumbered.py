"""The course was renumbered: its old notebook names and part ids, for every message that meets one.

Lecture and exercise notebooks got new numbers, and part ids (the ``exNN.part`` strings passed
to ``check()``) new prefixes; three parts moved to another notebook. An instructor or the grader
meeting an old name (a student's notebook, ``--exercise``, ``--as``, ``--column``, a line of
manual.csv, an out folder graded before) is told, in one clause, which name it now is
(:func:`explain`). Hidden cases are drawn from the part id, so grades made under the old names
are not carried over: ``edu-dl grade`` refuses an out folder that holds them
(:func:`refuse_old_grades`) and says how to grade again.

This file (and its test) is the one place the old names are spelled; everywhere else they are
reached through these tables.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from functools import partial
from pathlib import Path

from edu_dl.grading.model import NothingToGrade
from edu_dl.grading.stages.collect import noted

# Old notebook name -> new, in the course's order.
OLD_NOTEBOOKS: dict[str, str] = {
    "01_getting_started": "01_getting_started",
    "02_cpu_vs_gpu": "02_cpu_vs_gpu",
    "02b_writing_a_gpu_kernel": "03_writing_a_gpu_kernel",
    "02c_timing_the_gpu": "04_timing_the_gpu",
    "02d_the_gpu_memory_system": "05_the_gpu_memory_system",
    "03_feeding_the_gpu": "06_feeding_the_gpu",
    "04_computational_graphs": "07_computational_graphs",
    "05_autograd_from_scratch": "08_autograd_from_scratch",
    "06_tensorflow": "09_tensorflow",
    "07_pytorch": "10_pytorch",
    "07b_convolutions": "11_convolutions",
    "08_static_vs_dynamic": "12_static_vs_dynamic",
    "08b_caffe_and_the_landscape": "13_caffe_and_the_landscape",
    "08c_compiling_dynamic_code": "14_compiling_dynamic_code",
    "09_shootout": "15_shootout",
    "10_many_devices": "16_many_devices",
    "12_gpu_practice": "17_gpu_practice",
    "13_attention": "18_attention",
}

# Old part-id prefix -> new (``ex02b.row_sums`` -> ``ex03.row_sums``) ...
OLD_PREFIXES: dict[str, str] = {
    "ex01": "ex01",
    "ex02": "ex02",
    "ex02b": "ex03",
    "ex02d": "ex05",
    "ex03": "ex06",
    "ex04": "ex07",
    "ex05": "ex08",
    "ex06": "ex09",
    "ex07": "ex10",
    "ex11": "ex11",
    "ex08": "ex12",
    "ex08c": "ex14",
    "ex09": "ex15",
    "ex10": "ex16",
    "ex12": "ex17",
    "ex13": "ex18",
}

# ... but for the three parts that moved to another notebook.
MOVED_PARTS: dict[str, str] = {
    "ex12.stream_timer": "ex04.stream_timer",
    "ex03.feed_bytes": "ex09.feed_bytes",
    "ex08.caffe_forward": "ex13.caffe_forward",
}


def new_part_id(old: str) -> str | None:
    """The new id of an old part id (``exNN.name``), or None when ``old`` has no old prefix.

    A few old prefixes are new prefixes of other notebooks too (``ex03``): whether ``old`` is
    an old id or a current one only the course can tell, so :func:`explain` asks it."""
    if old in MOVED_PARTS:
        return MOVED_PARTS[old]
    prefix, dot, rest = old.partition(".")
    if not dot or not rest or prefix not in OLD_PREFIXES:
        return None
    return f"{OLD_PREFIXES[prefix]}.{rest}"


def new_name(old: str) -> str | None:
    """The new name of an old notebook name or old part id (None: neither)."""
    return OLD_NOTEBOOKS.get(old) or new_part_id(old)


def explain(name: str, known: Collection[str]) -> str:
    """"" unless ``name`` is an old notebook name or part id whose new name is in ``known``
    (and ``name`` itself is not); else a clause that says which name it now is."""
    if name in known:
        return ""
    new = new_name(name)
    if new is None or new == name or new not in known:
        return ""
    return f"{name} is this course's old name of {new} (the course was renumbered)"


def explained(message: str, names: Iterable[str], known: Collection[str]) -> str:
    """``message`` with the clause of each of ``names`` that is an old name (``; ``-joined);
    unchanged when none is."""
    return noted(message, names, partial(explain, known=known))


def old_grades(names: Iterable[str], known: Collection[str]) -> dict[str, str]:
    """Old name -> new of those of ``names`` (exercises a gradebook holds) that are old names
    of exercises in ``known``."""
    return {name: str(new_name(name)) for name in sorted(set(names))
            if explain(name, known)}


def refuse_old_grades(out: Path, graded: Iterable[str], known: Collection[str],
                      submissions: Path, source: Path) -> None:
    """Raise NothingToGrade when ``out`` holds grades (of the exercises ``graded``) made under
    the old name of an exercise of the source (``known``): their part ids and hidden cases
    changed, so they are graded again into a new folder, never mixed with new grades."""
    old = old_grades(graded, known)
    if old:
        shown = ", ".join(f"{name} is now {new}" for name, new in old.items())
        raise NothingToGrade(
            f"{out} holds grades made before the course was renumbered ({shown}): part ids "
            "and hidden cases changed with the numbers, so grade again into a new folder: "
            f"edu-dl grade {submissions} --source {source} --out NEW_FOLDER")


def table() -> list[str]:
    """The instructors' guide's table of the renumbering, as Markdown lines: each notebook's
    old and new names and its part-id prefixes, then the parts that moved."""
    prefixes = {new: old for old, new in OLD_PREFIXES.items()}
    lines = ["| Old notebook | New notebook | Old part ids | New part ids |",
             "|---|---|---|---|"]
    for old, new in OLD_NOTEBOOKS.items():
        now = f"ex{new[:2]}"
        before = prefixes.get(now)
        ids = (f"`{before}.*`", f"`{now}.*`") if before else ("", "")
        lines.append(f"| `{old}` | `{new}` | {ids[0]} | {ids[1]} |")
    lines += ["", "| Old part id | New part id |", "|---|---|"]
    lines += [f"| `{old}` | `{new}` |" for old, new in MOVED_PARTS.items()]
    return lines
