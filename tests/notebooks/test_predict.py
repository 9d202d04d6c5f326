"""Predict, then measure: a missing prediction shows nothing of the answer; a made one is
compared with the measurement, whatever its kind."""

from __future__ import annotations

import numpy as np
import pytest

from edu_dl.notebook.predict import compare


def test_a_missing_prediction_hides_the_measurement(capsys: pytest.CaptureFixture[str]) -> None:
    assert not compare({"grows with the batch": (None, "activations"),
                        "grows with Adam": ("state", "state")})
    out = capsys.readouterr().out
    assert "prediction in the cell above first (grows with the batch)" in out
    assert "activations" not in out and "state" not in out  # nothing of either answer
    assert not compare({"order matters": (..., False)})


@pytest.mark.parametrize("predicted, measured, agrees", [
    ("Activations", "activations", True),
    ("state", "activations", False),
    (False, False, True),
    (0, False, False),  # a boolean question takes a boolean
    (0.5, 0.5078, False),
    ({"state", "gradients"}, ["gradients", "state"], True),
    (np.array([1.0, 2.0]), np.array([1.0, 2.0 + 1e-12]), True),
    (np.array([1.0, 2.0]), np.array([1.0, 2.5]), False),
    (np.array([1.0, 2.0]), np.array([1.0, 2.0, 3.0]), False),
])
def test_each_kind_of_prediction_is_compared(predicted: object, measured: object, agrees: bool,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert compare({"q": (predicted, measured)}, abs_tol=1e-9)
    out = capsys.readouterr().out
    assert out.startswith("✓" if agrees else "✗"), out
    if not agrees:
        assert "the measurement says" in out


def test_a_tolerance_lets_a_close_number_agree(capsys: pytest.CaptureFixture[str]) -> None:
    assert compare({"limit": (0.5, 0.5078)}, abs_tol=0.02)
    assert capsys.readouterr().out.startswith("✓ limit: you predicted 0.5")


def test_a_prediction_not_written_yet_is_missing() -> None:
    from edu_dl.notebook.predict import made

    def handed_out() -> str:
        raise NotImplementedError()

    assert made(handed_out) is None
    assert made(lambda: "state") == "state"
