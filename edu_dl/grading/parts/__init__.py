"""The graded parts, one module per exercise: ``parts/ex05.py`` holds every ``ex05.*`` part.

A module defines a list ``PARTS`` of :class:`edu_dl.grading.Part`. ``get("ex05.relu_backward")``
imports ``edu_dl.grading.parts.ex05`` only when a check first needs it.
"""

from __future__ import annotations

import importlib
import pkgutil

from ..protocol import PART_ID
from ..spec import Part


def get(part_id: str) -> Part:
    """The Part with this id; KeyError naming the known parts when there is none."""
    match = PART_ID.match(part_id)
    if match is None:
        raise KeyError(f"{part_id!r} is not a part id: expected 'exNN.name', e.g. "
                       "'ex05.relu_backward'")
    module_name = f"{__name__}.{match.group(1)}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        raise KeyError(f"no exercise {match.group(1)!r}: no module {module_name}") from None
    for part in module.PARTS:
        if part.id == part_id:
            return part
    known = ", ".join(part.id for part in module.PARTS)
    raise KeyError(f"no part {part_id!r} in {module_name} (it has: {known})")


def modules() -> list[str]:
    """The exercise modules present: ['ex02', 'ex05', ...]."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if PART_ID.match(m.name + ".x"))


def all_parts() -> list[Part]:
    """Every part of every exercise module, in module order."""
    return [part for name in modules()
            for part in importlib.import_module(f"{__name__}.{name}").PARTS]
