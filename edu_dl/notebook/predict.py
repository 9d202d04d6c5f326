"""Predict, then measure: a notebook question whose answer the next cell would show.

A cell asks for a prediction as a function the student writes (``def predicted_growth():``,
handed out raising NotImplementedError; :func:`made` calls it) and the cell after it measures.
:func:`compare` is called by the measuring cell *before* it prints anything: while a prediction
is still missing it says so and returns False, so the cell shows nothing of the answer; once
every prediction is made it prints, per question, whether the measurement agrees and what it
found, and returns True (the cell then prints its table).

    if compare({"grows when the batch doubles": (made(predicted_growth), measured)}):
        print(table)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np


def _missing(predicted: Any) -> bool:
    return predicted is None or predicted is Ellipsis


def _shown(value: Any) -> str:
    return repr(np.round(value, 6).tolist()) if isinstance(value, np.ndarray) else repr(value)


def _agrees(predicted: Any, measured: Any, rel_tol: float, abs_tol: float) -> bool:
    if isinstance(predicted, np.ndarray) or isinstance(measured, np.ndarray):
        a, b = np.asarray(predicted), np.asarray(measured)
        return a.shape == b.shape and a.dtype.kind in "fiu" and \
            bool(np.allclose(a, b, rtol=rel_tol, atol=abs_tol))
    if isinstance(predicted, bool) or isinstance(measured, bool):
        return bool(predicted) == bool(measured) and isinstance(predicted, bool)
    if isinstance(predicted, (int, float)) and isinstance(measured, (int, float)):
        return math.isclose(float(predicted), float(measured), rel_tol=rel_tol, abs_tol=abs_tol)
    if isinstance(predicted, str) and isinstance(measured, str):
        return predicted.strip().lower() == measured.strip().lower()
    if isinstance(predicted, (set, frozenset, list, tuple)) and \
            isinstance(measured, (set, frozenset, list, tuple)):
        return {str(p).strip().lower() for p in predicted} == \
            {str(m).strip().lower() for m in measured}
    return bool(predicted == measured)


def made(prediction: Callable[[], Any]) -> Any:
    """What a prediction function returns, or None while it is not written yet (it raises
    NotImplementedError, as the exercise hands it out)."""
    try:
        return prediction()
    except NotImplementedError:
        return None


def compare(questions: Mapping[str, tuple[Any, Any]], *, rel_tol: float = 0.0,
            abs_tol: float = 0.0) -> bool:
    """For each question, ``(your prediction, the measurement)``: print whether they agree.

    A prediction still ``None`` (or ``...``) prints one line asking for it and returns False
    before any measurement is shown. Numbers and arrays agree within ``rel_tol``/``abs_tol``,
    strings regardless of case, collections as sets, booleans only with booleans."""
    missing = [name for name, (predicted, _) in questions.items() if _missing(predicted)]
    if missing:
        print(f"Write your prediction in the cell above first ({', '.join(missing)}): this "
              "cell shows the answer.")
        return False
    for name, (predicted, measured) in questions.items():
        if _agrees(predicted, measured, rel_tol, abs_tol):
            print(f"✓ {name}: you predicted {_shown(predicted)}, and so it is.")
        else:
            print(f"✗ {name}: you predicted {_shown(predicted)}; the measurement says "
                  f"{_shown(measured)}.")
    return True
