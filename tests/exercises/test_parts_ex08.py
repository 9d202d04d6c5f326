"""Exercise 8's parts: the solutions pass on many drawn cases, typical mistakes fail with their
hint (no hint speaks to a right answer), writes into inputs and library gradients are refused."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import pytest
from fixtures.exercise_helpers import (
    assert_solution_passes,
    checked,
    course_module,
    course_part,
    fresh_release,
    printed_text,
    run_check,
    solution_namespace,
    solution_package,
    solution_sources,
)

import edu_dl
from edu_dl.grading import protocol
from edu_dl.grading.authoring import parts, release
from edu_dl.grading.authoring.hints import first_hint
from edu_dl.grading.stages import judge
from edu_dl.grading.trust import source as trusted_source
from edu_dl.models import spec as models

pytestmark = pytest.mark.usefixtures("in_solutions")  # check() finds ./parts there

ex08 = course_module("ex08")
ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "solutions" / "08_autograd_from_scratch.ipynb"
BY_HAND = "this part asks you to derive the gradient yourself"
SOLUTION = solution_namespace("08_autograd_from_scratch.ipynb")
CHECKED = {"ex08.mul_backward": "mul_backward", "ex08.relu_backward": "relu_backward",
           "ex08.unbroadcast": "unbroadcast", "ex08.tape_ops": "Tape",
           "ex08.tape_backward": "backward", "ex08.softmax_cross_entropy": "softmax_cross_entropy",
           "ex08.batchnorm_forward": "batchnorm_forward",
           "ex08.batchnorm_backward": "batchnorm_backward",
           "ex08.dropout_forward": "dropout_forward", "ex08.dropout_backward": "dropout_backward",
           "ex08.faster_sgd_step": "sgd_step"}
Tape = SOLUTION["Tape"]
unbroadcast = SOLUTION["unbroadcast"]
backward = SOLUTION["backward"]


def test_every_part_is_checked_here() -> None:
    assert set(CHECKED) == {p.id for p in ex08.PARTS}


# --------------------------------------------------------------------------- the solutions


@pytest.mark.parametrize("part_id", sorted(CHECKED))
@pytest.mark.parametrize("hidden", [False, True])
def test_the_solution_passes_many_drawn_cases_and_no_hint_speaks(part_id: str,
                                                                  hidden: bool) -> None:
    part = course_part(part_id)
    fn = SOLUTION[CHECKED[part_id]]
    for seed in range(6):
        assert assert_solution_passes(part, fn, hidden, np.random.default_rng(seed)) > 0
        for args in protocol.roundtrip(part.cases(np.random.default_rng(seed), hidden)):
            expected = part.expected(*args)
            assert first_hint(part.hints, expected, part.call(fn, args), args) is None


def test_drawn_programs_use_a_value_twice_and_vary() -> None:
    """Every drawn program tests accumulation, and the grader's draws are not all alike."""
    part = course_part("ex08.tape_backward")
    programs = [args[1] for seed in range(5)
                for args in part.cases(np.random.default_rng(seed), True)]
    for program in programs:
        # A weighted sum uses both its inputs, sin and tanh their first.
        used = [i for code, a, b in program.tolist() for i in ((a, b) if code == 0 else (a,))]
        assert np.bincount(used).max() >= 2
    assert len({p.tobytes() for p in programs}) == len(programs)


class TapeWithoutExp(Tape):
    def exp(self, a):
        raise NotImplementedError


def test_each_op_of_the_tape_earns_its_share() -> None:
    """tape_ops is graded case by case: a tape without exp keeps the other ops' points."""
    part = course_part("ex08.tape_ops")
    rng = np.random.default_rng(11)
    cases = protocol.roundtrip([*part.cases(rng, False), *part.cases(rng, True)])
    got: list[Any] = []
    for args in cases:
        try:
            got.append(part.call(TapeWithoutExp, args))
        except NotImplementedError:
            got.append(protocol.ErrorText("not implemented yet"))
    judged = judge.judge_part(part, cases, got, found_source("ex08.tape_ops"))
    exps = sum(str(args[0]) == "exp" for args in cases)
    assert judged.status == "partial" and exps == 2
    assert judged.points == pytest.approx(part.points * (len(cases) - exps) / len(cases), abs=0.01)


def found_source(part_id: str) -> str | None:
    return trusted_source.find_source(nbformat.read(NOTEBOOK, as_version=4), part_id,
                                      solution_package())


def test_the_tape_differentiates_a_composed_program_as_torch_does() -> None:
    """The solution's two parts together: an engine, on ops that broadcast and reuse a value."""
    import torch

    rng = np.random.default_rng(3)
    x_value, w_value = rng.standard_normal((4, 3)), rng.standard_normal(3)
    tape = Tape()
    x, w = tape.input(x_value), tape.input(w_value)
    h = tape.mul(x, w)
    z = tape.mean(tape.exp(tape.add(h, tape.mul(h, w))))  # w used twice, broadcast both times
    grads = backward(tape, z, np.array(1.0))
    xt = torch.tensor(x_value, requires_grad=True)
    wt = torch.tensor(w_value, requires_grad=True)
    ht = xt * wt
    torch.exp(ht + ht * wt).mean().backward()
    assert xt.grad is not None and wt.grad is not None
    np.testing.assert_allclose(grads[x], xt.grad.numpy(), rtol=1e-10)
    np.testing.assert_allclose(grads[w], wt.grad.numpy(), rtol=1e-10)


# --------------------------------------------------------------------------- typical mistakes


class ExpTimesX(Tape):
    def exp(self, a):
        x = self.values[a]
        return self.record(np.exp(x), (a,), lambda g: (g * x,))


class MeanLikeSum(Tape):
    def mean(self, a):
        shape = self.values[a].shape
        return self.record(self.values[a].mean(), (a,), lambda g: (np.full(shape, g),))


class AddWithoutUnbroadcast(Tape):
    def add(self, a, b):
        return self.record(self.values[a] + self.values[b], (a, b), lambda g: (g, g))


class MatmulTransposed(Tape):
    def matmul(self, a, b):
        x, w = self.values[a], self.values[b]
        return self.record(x @ w, (a, b), lambda g: (g @ w.T, g.T @ x))


class LogSign(Tape):
    def log(self, a):
        x = self.values[a]
        return self.record(np.log(x), (a,), lambda g: (-g / x,))


class LogOfX(Tape):
    def log(self, a):
        x = self.values[a]
        return self.record(np.log(x), (a,), lambda g: (g * np.log(x),))


class ReluAtZero(Tape):
    def relu(self, a):
        x = self.values[a]
        return self.record(np.maximum(x, 0), (a,), lambda g: (g * (x >= 0),))


class ReluIntoDout(Tape):
    def relu(self, a):
        x = self.values[a]

        def vjp(g: np.ndarray) -> tuple[np.ndarray]:
            g[x <= 0] = 0.0
            return (g,)

        return self.record(np.maximum(x, 0), (a,), vjp)


class ReluPassesAll(Tape):
    def relu(self, a):
        return self.record(np.maximum(self.values[a], 0), (a,), lambda g: (g,))


class SumScalar(Tape):
    def sum(self, a):
        return self.record(self.values[a].sum(), (a,), lambda g: (g,))


def replay(accumulate: bool = True, reverse: bool = True, sign: float = 1.0) -> Callable:
    def wrong(tape: Any, output: int, dout: np.ndarray) -> list[np.ndarray]:
        grads = [np.zeros(np.shape(v)) for v in tape.values]
        grads[output] = sign * dout
        for out, inputs, vjp in (tape.records[::-1] if reverse else tape.records):
            for i, g in zip(inputs, vjp(grads[out])):
                grads[i] = grads[i] + g if accumulate else g
        return grads

    return wrong


def leading_axes_only(grad: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    return grad.sum(axis=tuple(range(grad.ndim - len(shape))))


def averaged(grad: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    return unbroadcast(grad, shape) * int(np.prod(shape)) / grad.size


def bn_forward(unbiased_norm: bool = False, biased_running: bool = False,
               swapped: bool = False, test_batch: bool = False, test_updates: bool = False
               ) -> Callable:
    def forward(x, gamma, beta, rm, rv, train, m, eps):  # type: ignore[no-untyped-def]
        n = x.shape[0]
        if not train and not (test_batch or test_updates):
            return gamma * (x - rm) / np.sqrt(rv + eps) + beta, rm.copy(), rv.copy()
        mu, var = x.mean(0), x.var(0, ddof=1 if unbiased_norm else 0)
        out = gamma * (x - mu) / np.sqrt(var + eps) + beta
        if not train and test_updates:
            out = gamma * (x - rm) / np.sqrt(rv + eps) + beta
        new_mean = m * rm + (1 - m) * mu if swapped else (1 - m) * rm + m * mu
        batch_var = x.var(0) if biased_running else x.var(0) * n / (n - 1)
        new_var = (1 - m) * rv + m * batch_var
        if not train and test_batch:
            return out, rm.copy(), rv.copy()
        return out, new_mean, new_var

    return forward


def bn_in_place(x, gamma, beta, rm, rv, train, m, eps):  # type: ignore[no-untyped-def]
    out, new_mean, new_var = SOLUTION["batchnorm_forward"](x, gamma, beta, rm, rv, train, m, eps)
    rm[...], rv[...] = new_mean, new_var  # as torch does, into the caller's arrays
    return out, rm, rv


def bn_backward(terms: str = "direct mean var", dbeta_mean: bool = False,
                sign: float = 1.0) -> Callable:
    def back(dout, x, gamma, eps):  # type: ignore[no-untyped-def]
        n = x.shape[0]
        std = np.sqrt(x.var(0) + eps)
        x_hat = (x - x.mean(0)) / std
        dx_hat = dout * gamma
        dx = dx_hat.copy()
        if "mean" in terms:
            dx = dx - dx_hat.mean(0)
        if "var" in terms:
            dx = dx - x_hat * (dx_hat * x_hat).sum(0) / n
        dbeta = dout.mean(0) if dbeta_mean else dout.sum(0)
        return sign * dx / std, (dout * x_hat).sum(0), dbeta

    return back


def dropout(scale: str = "divide", keep_below: bool = False, at_test: str = "") -> Callable:
    def fn(x, p, train, seed):  # type: ignore[no-untyped-def]
        u = np.random.default_rng(seed).random(x.shape)
        keep = u < p if keep_below else u >= p
        factor = {"divide": 1 / (1 - p), "none": 1.0, "multiply": 1 - p,
                  "twice": 1 / (1 - p) ** 2}[scale]
        if not train:
            return {"": x.copy(), "scaled": x * keep / (1 - p), "mask": x * keep,
                    "times keep": x * (1 - p), "divided": x / (1 - p)}[at_test]
        return x * keep * factor

    return fn


def ce_without_mean(logits: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    loss, dlogits = SOLUTION["softmax_cross_entropy"](logits, y)
    return loss, dlogits * len(y)


def ce_without_label(logits: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    shifted = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
    return float(-np.log(p[np.arange(len(y)), y]).mean()), p / len(y)


def ce_without_max_shift(logits: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    with np.errstate(over="ignore", invalid="ignore"):
        p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
        dlogits = p.copy()
        dlogits[np.arange(len(y)), y] -= 1
        return float(-np.log(p[np.arange(len(y)), y]).mean()), dlogits / len(y)


MISTAKES: list[tuple[str, Any, str]] = [
    ("ex08.unbroadcast", lambda g, s: g, "you returned grad unchanged"),
    ("ex08.unbroadcast", leading_axes_only, "you summed the leading axes only"),
    ("ex08.unbroadcast", averaged, "averaged where it should add up"),
    ("ex08.unbroadcast", lambda g, s: g.sum(axis=0), "the result must have exactly `shape`"),
    ("ex08.tape_ops", ExpTimesX, "exp's vjp used x"),
    ("ex08.tape_ops", MeanLikeSum, "exactly x.size times too large"),
    ("ex08.tape_ops", AddWithoutUnbroadcast, "must sum the gradient back (unbroadcast)"),
    ("ex08.tape_ops", MatmulTransposed, "let the shapes tell you which factor to transpose"),
    ("ex08.tape_ops", LogSign, "the opposite sign"),
    ("ex08.tape_ops", LogOfX, "the derivative of log x is 1 / x"),
    ("ex08.tape_ops", ReluAtZero, "relu'(0) = 0"),
    ("ex08.tape_ops", ReluPassesAll, "relu's vjp passed dout through everywhere"),
    ("ex08.tape_ops", ReluIntoDout, "your function wrote into its argument `dout`"),
    ("ex08.tape_ops", SumScalar, "even when dout is a single number"),
    ("ex08.tape_backward", replay(accumulate=False), "accumulate (+=) every contribution"),
    ("ex08.tape_backward", replay(reverse=False), "replay the tape from the last record"),
    ("ex08.tape_backward", replay(sign=-1.0), "the opposite sign"),
    ("ex08.softmax_cross_entropy", ce_without_max_shift, "subtract each row's maximum"),
    ("ex08.softmax_cross_entropy", ce_without_mean, "exactly N times too large"),
    ("ex08.softmax_cross_entropy", ce_without_label, "you left out the label term"),
    ("ex08.batchnorm_forward", bn_forward(unbiased_norm=True), "the batch's biased variance"),
    ("ex08.batchnorm_forward", bn_forward(biased_running=True), "averages the UNBIASED"),
    ("ex08.batchnorm_forward", bn_forward(swapped=True), "the weight of the NEW batch statistic"),
    ("ex08.batchnorm_forward", bn_forward(test_batch=True), "normalise with running_mean"),
    ("ex08.batchnorm_forward", bn_forward(test_updates=True),
     "leaves the running averages as they are"),
    ("ex08.batchnorm_forward", bn_in_place,
     "wrote into its arguments `running_mean` (3 of 3 entries), `running_var`"),
    ("ex08.batchnorm_backward", bn_backward("direct"), "you kept only the first"),
    ("ex08.batchnorm_backward", bn_backward("direct var"), "the path through the mean is missing"),
    ("ex08.batchnorm_backward", bn_backward("direct mean"),
     "the path through the variance is missing"),
    ("ex08.batchnorm_backward", bn_backward(dbeta_mean=True), "dbeta is averaged"),
    ("ex08.batchnorm_backward", bn_backward(sign=-1.0), "dx has the opposite sign"),
    ("ex08.dropout_forward", dropout(scale="none"), "divide the kept values by 1 - p"),
    ("ex08.dropout_forward", dropout(scale="multiply"), "you multiplied by 1 - p"),
    ("ex08.dropout_forward", dropout(keep_below=True), "p is the probability to DROP"),
    ("ex08.dropout_forward", dropout(at_test="scaled"), "with train=False dropout does nothing"),
    ("ex08.dropout_forward", dropout(at_test="mask"), "with train=False dropout does nothing"),
    ("ex08.dropout_backward", lambda d, p, train, seed: d, "you passed dout through unchanged"),
    ("ex08.dropout_backward", dropout(scale="none"), "the 1 / (1 - p) is missing"),
    ("ex08.dropout_backward", dropout(at_test="scaled"), "with train=False dropout does nothing"),
]


# Issue 44: scaling at test time (classic dropout's rule, or the train-time one again) or twice
# got a generic "1/2 ... divided once too often"; the hint says what was done. Kept apart from
# MISTAKES: test_the_release_gives_the_same_hint reads the committed release, and these are
# proven against one frozen from the part file as it is now (test_..._in_what_students_have).
AT_TEST = "at test time the output must equal the input (inverted dropout scales during " \
    "training only): with train=False you "
AT_TEST_BACK = "at test time dx must equal dout (inverted dropout scales during training " \
    "only): with train=False you "
SCALED_AT_TEST: list[tuple[str, Any, str]] = [
    ("ex08.dropout_forward", dropout(at_test="times keep"), AT_TEST + "multiplied by 1 - p"),
    ("ex08.dropout_forward", dropout(at_test="divided"), AT_TEST + "divided by 1 - p"),
    ("ex08.dropout_forward", dropout(scale="twice"), "you divided the kept values by 1 - p twice"),
    ("ex08.dropout_backward", dropout(at_test="times keep"),
     AT_TEST_BACK + "multiplied dout by 1 - p"),
    ("ex08.dropout_backward", dropout(at_test="divided"), AT_TEST_BACK + "divided dout by 1 - p"),
    ("ex08.dropout_backward", dropout(scale="twice"), "(you divided by 1 - p twice)"),
]


@pytest.mark.parametrize(("part_id", "fn", "hint"), SCALED_AT_TEST,
                         ids=[f"{p}-{h[-30:]}" for p, _, h in SCALED_AT_TEST])
def test_dropout_scaled_at_test_time_or_twice_is_named(capsys: pytest.CaptureFixture[str],
                                                       part_id: str, fn: Any, hint: str) -> None:
    ok, out = run_check(capsys, part_id, fn)
    assert not ok and hint in out, out
    assert "divided once too often" not in out and "times the expected one" not in out, out


@pytest.mark.parametrize(("part_id", "fn", "hint"), SCALED_AT_TEST,
                         ids=[f"{p}-{h[-30:]}" for p, _, h in SCALED_AT_TEST])
def test_dropout_scaling_hints_ship_in_what_students_have(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, part_id: str, fn: Any,
        hint: str) -> None:
    """The same hint from the release as `edu-dl assign` makes it (frozen values only): in a
    student's check(), and in the judge that validate (and grade) run on the sandbox's results."""
    monkeypatch.chdir(fresh_release(tmp_path, "ex08"))
    outcome, report = checked(part_id, fn)
    assert not outcome and hint in report, report
    part = parts.get(part_id, local=True)
    cases = [args for args, _ in release.visible_cases(part)]
    judged = judge.judge_part(part, cases, [part.call(fn, args) for args in cases])
    assert judged.status == "failed" and hint in judged.message, judged.message
    assert ":Mistake" in judged.hints  # the gradebook records the part's own hint, not generic


@pytest.mark.parametrize(("part_id", "fn", "hint"), MISTAKES,
                         ids=[f"{p}-{h[:30]}" for p, _, h in MISTAKES])
def test_a_typical_mistake_fails_with_its_hint(capsys: pytest.CaptureFixture[str], part_id: str,
                                               fn: Any, hint: str) -> None:
    ok, out = run_check(capsys, part_id, fn)
    assert not ok
    assert hint in out, out


@pytest.mark.parametrize(("part_id", "fn", "hint"), MISTAKES[::3],
                         ids=[f"{p}-{h[:30]}" for p, _, h in MISTAKES[::3]])
def test_the_release_gives_the_same_hint(monkeypatch: pytest.MonkeyPatch, part_id: str,
                                         fn: Any, hint: str) -> None:
    """What students have, exercises/parts/ex08.npz (frozen replays and rules), hints alike."""
    monkeypatch.chdir(ROOT / "exercises")
    outcome, report = checked(part_id, fn)
    assert not outcome and hint in report, report


def test_every_hint_is_shown_by_some_mistake() -> None:
    """No hint is dead text: each new part's hints are each what some mistake above gets."""
    for part in ex08.PARTS:
        if part.id in ("ex08.mul_backward", "ex08.relu_backward"):
            continue  # kept as they were: test_check.py shows their hints
        shown = [h for p, _, h in MISTAKES + SCALED_AT_TEST if p == part.id]
        for hint in part.hints:
            assert any(h in hint.message for h in shown), (part.id, hint.message)


def writes_into_dout(dout: np.ndarray, p: float, train: bool, seed: int) -> np.ndarray:
    dout *= np.random.default_rng(seed).random(dout.shape) >= p
    dout /= 1 - p
    return dout


def test_writing_into_an_input_fails_the_case(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run_check(capsys, "ex08.dropout_backward", writes_into_dout)
    assert not ok
    assert "case 1 of 4" in out and "wrote into its argument `dout`" in out


def test_relu_backward_writing_into_dout_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 25: a relu_backward that writes into the caller's dout passed; check()'s generic
    in-place check fails it and names the argument."""
    def into_dout(dout: np.ndarray, x: np.ndarray) -> np.ndarray:
        dout[x <= 0] = 0.0
        return dout

    ok, out = run_check(capsys, "ex08.relu_backward", into_dout)
    assert not ok and "dout" in out, out


# --------------------------------------------------------------------------- nothing re-typed


def _words(line: str) -> str:
    """A code line without its comment and with its spaces normalised."""
    return re.sub(r"\s+", " ", line.split("#")[0]).strip()


def test_no_solution_is_lecture_code_retyped() -> None:
    """At most a quarter of each solution region's lines appears, verbatim, in a lecture's code
    or output (printed sources) or in edu_dl: the exercise asks for what the lecture leaves open."""
    text = [p.read_text() for p in (ROOT / "edu_dl").rglob("*.py")]
    for path in (ROOT / "lectures").glob("*.ipynb"):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code":
                text += [cell.source, *(printed_text(o) for o in cell.get("outputs", []))]
    known = {_words(line) for chunk in text for line in chunk.splitlines()}
    regions = [region for source in solution_sources(NOTEBOOK)  # mytorch/tape.py's included
               for region in re.findall(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION",
                                        source, re.S)]
    assert len(regions) == 18
    for region in regions:
        lines = [w for w in map(_words, region.splitlines()) if w]
        retyped = [w for w in lines if w in known]
        assert len(retyped) <= len(lines) / 4, retyped


def outside_and_pieces(cell_source: str) -> tuple[str, set[str]]:
    """A solution cell's given text (docstrings, signatures) and the pieces of its solution's
    lines: each side of `=` and `,`, without `return`, of 8 characters or more and with an
    operator or a call (a bare name says nothing)."""
    given = re.sub(r"### BEGIN SOLUTION\n.*?### END SOLUTION", "", cell_source, flags=re.S)
    pieces = {piece.strip() for region in re.findall(
        r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", cell_source, re.S)
        for line in region.splitlines()
        for piece in re.split(r",|=|\breturn\b", _words(line))
        if len(piece.strip()) >= 8 and re.search(r"[-+*/@(]", piece)}
    return _words(given.replace("\n", " ")), pieces


OLD_MATMUL = '''def matmul_backward(dout, x, w):
    """Backward of out = x @ w: dx = dout @ w.T, dw = x.T @ dout."""
    ### BEGIN SOLUTION
    return dout @ w.T, x.T @ dout
    ### END SOLUTION'''


def test_no_docstring_gives_the_line_to_type() -> None:
    given, pieces = outside_and_pieces(OLD_MATMUL)  # what issue 25 found: the check sees it
    assert pieces == {"dout @ w.T", "x.T @ dout"} and all(p in given for p in pieces)
    for cell in nbformat.read(NOTEBOOK, as_version=4).cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            given, pieces = outside_and_pieces(cell.source)
            assert not [p for p in pieces if p in given], cell.source


# --------------------------------------------------------------------------- library gradients


def relu_by_autograd(dout, x):
    t = edu_dl.tensor(x, requires_grad=True)
    t.relu().backward(edu_dl.tensor(dout))
    return t.grad.numpy()


def softmax_ce_by_library(logits, y):
    return models.loss_and_grad(np, logits, y, "cross_entropy")


def bn_backward_by_torch(dout, x, gamma, eps):
    import torch

    xt = torch.tensor(x, requires_grad=True)
    gt = torch.tensor(gamma, requires_grad=True)
    bt = torch.zeros_like(gt, requires_grad=True)
    torch.nn.functional.batch_norm(xt, None, None, gt, bt, training=True, eps=eps).backward(
        torch.tensor(dout))
    return xt.grad.numpy(), gt.grad.numpy(), bt.grad.numpy()


@pytest.mark.parametrize(("part_id", "fn"), [("ex08.relu_backward", relu_by_autograd),
                                             ("ex08.softmax_cross_entropy",
                                              softmax_ce_by_library),
                                             ("ex08.batchnorm_backward", bn_backward_by_torch)])
def test_a_library_rule_is_refused(capsys: pytest.CaptureFixture[str], part_id: str,
                                   fn: Any) -> None:
    ok, out = run_check(capsys, part_id, fn)
    assert not ok
    assert out.startswith(f"✗ {part_id}: the values are right, but {BY_HAND}")


@pytest.mark.parametrize("part", ex08.PARTS, ids=lambda p: p.id)
def test_the_solutions_source_passes(part: Any) -> None:
    found = trusted_source.find_source(nbformat.read(NOTEBOOK, as_version=4), part.id,
                                       solution_package())
    assert found is not None and part.source_check is not None
    assert part.source_check(found).ok
