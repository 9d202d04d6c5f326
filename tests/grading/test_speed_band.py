"""How a speed row is judged from the CPU times measured, without running anything: cost per
call by differences of a small and a big run, and a band around the credit line that a person
decides instead of the machine. The measurements here are made up."""

from __future__ import annotations

from pathlib import Path

import pytest

from edu_dl.grading import cost
from edu_dl.grading.model import BY_HAND, OUTSIDE, Exercise, Job, Summary
from edu_dl.grading.settings import Settings
from edu_dl.grading.stages import speed, speed_rows
from edu_dl.grading.stages.secret import VALIDATION_SECRET
from edu_dl.grading.term import manual
from edu_dl.grading.term.report import cost_lines
from edu_dl.speed.tasks import TASKS

PART = "ex02.faster_standardize"
CALLS = {"reference small": 25, "reference": 100, "submission small": 100, "submission": 400}


def measured(ratio: float, *, fixed: float = 0.3, reference_ms: float = 12.0,
             noise: float = 0.0) -> speed.Measurement:
    """A made-up measurement whose submission is ``ratio`` times cheaper per call than a
    reference of ``reference_ms`` per call; ``fixed``: each run's cost besides the calls."""
    found = speed.Measurement(PART, TASKS[PART].goal, correct=True)
    found.calls = dict(CALLS)
    per = {"reference": reference_ms / 1000, "submission": reference_ms / 1000 / ratio}
    found.runs = {kind: [fixed + calls * per[kind.split()[0]] + noise, fixed + calls
                         * per[kind.split()[0]]]
                  for kind, calls in CALLS.items()}
    return speed.judged(found, 2)


def test_a_ratio_clearly_past_the_line_is_decided_by_the_machine() -> None:
    line = speed.CREDIT_FRACTION * TASKS[PART].goal  # 6x
    high, low = line * (1 + speed.BAND), line * (1 - speed.BAND)
    person = speed.NEEDS_PERSON
    for ratio, status in [(20.0, "passed"), (high * 1.01, "passed"), (high * 0.99, person),
                          (line, person), (low * 1.01, person), (low * 0.99, "too slow"),
                          (1.0, "too slow")]:
        found = measured(ratio)
        assert found.ratio == pytest.approx(ratio), (ratio, found)
        assert found.status == status == speed.verdict(ratio, line), (ratio, found)
        assert found.passed == (status == "passed")


def test_the_messages_say_what_was_measured_and_who_decides() -> None:
    assert "reaches the 6.0x that earns credit (goal 10x)" in measured(12.0).message
    assert "falls short of the 6.0x" in measured(2.0).message
    close = measured(6.2).message
    assert "within 25% of the 6.0x that earns credit" in close and "a person grades it" in close
    assert "12.000 ms" in close and "per call" in close  # the measurement, for the person


def test_fixed_costs_cancel() -> None:
    """A run's fixed cost (the interpreter, imports, drawing the inputs) is in both runs of a
    kind: however large, and however different between the kinds, the ratio does not move. The
    old grader subtracted a separate baseline run: a baseline 0.1 s off moved a fast
    submission's ratio by half."""
    assert measured(14.0, fixed=0.3).ratio == pytest.approx(14.0)
    assert measured(14.0, fixed=3.0).ratio == pytest.approx(14.0)
    found = measured(14.0)
    found.runs["submission small"] = [t + 0.2 for t in found.runs["submission small"]]
    found.runs["submission"] = [t + 0.2 for t in found.runs["submission"]]
    assert speed.judged(found, 2).ratio == pytest.approx(14.0)


def test_the_best_of_each_run_is_kept() -> None:
    """A busy moment only adds time: one slow run among the rounds changes nothing."""
    assert measured(14.0, noise=0.5).ratio == pytest.approx(14.0)


def test_a_reference_measured_too_briefly_is_inconclusive() -> None:
    found = measured(10.0, reference_ms=0.5)  # 75 calls x 0.5 ms: under MIN_REFERENCE_S
    assert found.status == "inconclusive" and not found.passed and found.ratio == 0


def test_the_band_is_a_hand_graded_row() -> None:
    """Within the band the row waits for a person (manual.csv), with 0 points meanwhile; its
    answer is the function measured, so a changed answer asks to be graded again."""
    assert speed.NEEDS_PERSON == manual.NEEDS
    rows = {}
    for ratio in (20.0, 6.0, 2.0):
        found = measured(ratio)
        found.source = "def standardize(images):\n    return images\n"
        rows[ratio] = row_for(found)
    assert (rows[20.0].status, rows[20.0].points, rows[20.0].judged) == ("passed", 2.0, OUTSIDE)
    assert (rows[2.0].status, rows[2.0].points, rows[2.0].judged) == ("too slow", 0.0, OUTSIDE)
    close = rows[6.0]
    assert (close.status, close.points, close.judged) == (manual.NEEDS, 0.0, BY_HAND)
    assert manual.is_manual(close) and "standardize" in close.answer
    assert "a person grades it" in close.message
    sheet = manual.sheet([close], {})
    assert len(sheet) == 1 and sheet[0][2] == PART + ".speed" and sheet[0][3] == "2"


def row_for(found: speed.Measurement):  # type: ignore[no-untyped-def]
    exercise = Exercise("02_cpu_vs_gpu", None, "")  # type: ignore[arg-type]
    job = Job("ann", exercise, Path("ann.ipynb"), "02_cpu_vs_gpu")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(speed_rows, "measure_submitted", lambda *args, **kwargs: found)
        return speed_rows._speed_row(job, None, PART, True, VALIDATION_SECRET,  # type: ignore[arg-type]
                                     Settings(), ())


def test_the_measuring_time_is_reported_apart() -> None:
    with cost.metered() as spent:
        with cost.metered() as page:
            pass
        cost.speed_measured(7.0)
    assert spent.speed_seconds == 7.0 and spent.seconds < 7.0 and page.speed_seconds == 0
    assert spent.rounded()["speed_seconds"] == 7.0
    costs = {("ann", "02"): (cost.Cost(1.0, 1.0, 200.0, 10.0, 7.0), None),
             ("bob", "02"): (cost.Cost(1.0, 1.0, 200.0, 10.0, 6.5), cost.Cost(0.5, 0.5))}
    lines = cost_lines(Summary([], 2, 0, 10.0, True, costs=costs, peak_mb=300.0))
    assert lines[1] == ("measuring the speed tasks (sandboxed runs, not in the grader's own work "
                        "above): 13.5 s in all for 2 submission(s), most 7.0 s (ann, 02)")
    assert "most 1.5 s (bob, 02)" in lines[0]  # the page's time, not the measuring's


@pytest.mark.parametrize(("ratio", "rounds"), [(30.0, 1), (11.0, 2), (8.0, 2), (5.0, 2),
                                                (1.0, 1)])
def test_a_clear_verdict_after_one_round_is_not_measured_again(
        monkeypatch: pytest.MonkeyPatch, ratio: float, rounds: int) -> None:
    """Clearly fast enough (1.5x the band's ceiling) or clearly too slow (half its floor) after
    one round: no second round. Anything nearer the line gets its second round."""
    per = {"reference": 0.012, "submission": 0.012 / ratio}
    made: list[str] = []

    def fake_run(task_: object, run: speed._Run, source: str, seed: int,
                 shape: tuple[int, ...], *args: object) -> tuple:
        made.append(run.kind)  # every run "computes" zeros: the answers match
        return 0.3 + run.calls * per[run.kind.split()[0]], speed.np.zeros(shape), "", ""

    monkeypatch.setattr(speed, "_timed_run", fake_run)
    found = speed.measure(PART, "def standardize(x):\n    return x\n", 7, calls=40,
                          settings=Settings(without_sandbox="no sandbox"))
    assert found.correct, found.message
    assert sum(kind == "reference small" for kind in made) == rounds, (ratio, made)
