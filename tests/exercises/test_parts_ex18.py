"""Exercise 18's parts (the merge of two partial softmaxes, the causal tile count, the backward
pass): the solution passes (test_parts_trusted.py runs every part's), each typical
mistake gets its own hint and a correct answer none, an autograd engine is refused, and no
solution is lecture 18's (or edu_dl's) code re-typed."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fixtures.exercise_helpers import (
    assert_no_hint_for,
    assert_nothing_retyped,
    checked,
    course_part,
    fresh_release,
    solution_namespace,
)

from edu_dl.grading.authoring import parts, release
from edu_dl.grading.stages import judge

pytestmark = pytest.mark.usefixtures("in_solutions")  # check() finds ./parts there

NOTEBOOK = Path(__file__).resolve().parents[2] / "solutions" / "18_attention.ipynb"
SOLUTION = solution_namespace("18_attention.ipynb")
merge_partials = SOLUTION["merge_partials"]
causal_tiles = SOLUTION["causal_tiles"]
attention_backward = SOLUTION["attention_backward"]
FUNCTIONS = {"ex18.merge_partials": merge_partials, "ex18.causal_tiles": causal_tiles,
             "ex18.attention_backward": attention_backward}


# --------------------------------------------------------------------------- 1. the merge


def merge_without_rescale(m1, l1, o1, m2, l2, o2):
    l = l1 + l2
    return np.maximum(m1, m2), l, (l1[:, None] * o1 + l2[:, None] * o2) / l[:, None]


def merge_equal_partners(m1, l1, o1, m2, l2, o2):
    m, l, _ = merge_partials(m1, l1, o1, m2, l2, o2)
    return m, l, (o1 + o2) / 2


def merge_unnormalized(m1, l1, o1, m2, l2, o2):
    m = np.maximum(m1, m2)
    w1, w2 = l1 * np.exp(m1 - m), l2 * np.exp(m2 - m)
    w1, w2 = np.nan_to_num(w1), np.nan_to_num(w2)
    return m, w1 + w2, w1[:, None] * o1 + w2[:, None] * o2


def merge_nan_for_empty(m1, l1, o1, m2, l2, o2):
    """Right, but an empty first set is not guarded: l1 * exp(m1) / exp(m) with m1 = -inf."""
    m = np.maximum(m1, m2)
    with np.errstate(invalid="ignore"):
        w1, w2 = l1 * np.exp(m1 - m), l2 * np.exp(m2 - m)
        w1 = np.where(np.isinf(m1), np.nan, w1)  # as `l1 * exp(m1) / exp(m)` with m1 = -inf
    l = w1 + w2
    return m, l, (w1[:, None] * o1 + w2[:, None] * o2) / l[:, None]


def merge_overflowing(m1, l1, o1, m2, l2, o2):
    with np.errstate(all="ignore"):
        w1, w2 = l1 * np.exp(m1), l2 * np.exp(m2)
        m = np.maximum(m1, m2)
        l = (w1 + w2) / np.exp(m)
        return m, l, (w1[:, None] * o1 + w2[:, None] * o2) / (w1 + w2)[:, None]


def merge_smaller_max(m1, l1, o1, m2, l2, o2):
    _, l, o = merge_partials(m1, l1, o1, m2, l2, o2)
    return np.minimum(m1, m2), l, o


@pytest.mark.parametrize(("fn", "output", "hint"), [
    (merge_without_rescale, "output 1 (l)", "measured against different maxima"),
    (merge_equal_partners, "output 2 (o)", "o1 and o2 are not equal partners"),
    (merge_unnormalized, "output 2 (o)", "divide by the merged l"),
    (merge_nan_for_empty, "output 1 (l)", "exp(-inf - (-inf)) is NaN"),
    (merge_overflowing, "", "exp(800) overflows float64"),
    (merge_smaller_max, "output 0 (m)", "your m is the smaller maximum"),
])
def test_merge_mistakes_get_their_hints(fn: Any, output: str, hint: str) -> None:
    ok, out = checked("ex18.merge_partials", fn)
    assert not ok and hint in out, out
    assert output in out, out


def test_the_visible_cases_hold_an_empty_set_and_huge_scores() -> None:
    part = course_part("ex18.merge_partials")
    cases = part.cases(np.random.default_rng(0), False)
    assert any(np.isneginf(c[0]).any() for c in cases)  # the empty set first
    assert any(np.isneginf(c[3]).any() for c in cases)  # and second
    assert any(np.nanmax(part.expected(*c)[0]) > 709 for c in cases)  # exp(m) overflows


# --------------------------------------------------------------------------- 2. causal tiles


def tiles_brute_force(n, block_q, block_k):
    """Tiles with at least one (i, j), j <= i, by looking at every score."""
    visible = np.tril(np.ones((n, n), dtype=bool))
    return sum(bool(visible[q0:q0 + block_q, k0:k0 + block_k].any())
               for q0 in range(0, n, block_q) for k0 in range(0, n, block_k))


def test_the_tile_oracle_agrees_with_looking_at_every_score() -> None:
    part = course_part("ex18.causal_tiles")
    for hidden in (False, True):
        for args in part.cases(np.random.default_rng(2), hidden):
            if args[0] <= 1000:
                assert part.expected(*args) == tiles_brute_force(*(int(a) for a in args))


def every_tile(n, block_q, block_k):
    return -(-n // block_q) * -(-n // block_k)


def up_to_first_query(n, block_q, block_k):
    return sum(q0 // block_k + 1 for q0 in range(0, n, block_q))


def strictly_before_last_query(n, block_q, block_k):
    return sum(-(-(min(q0 + block_q, n) - 1) // block_k) for q0 in range(0, n, block_q))


def rounded_down(n, block_q, block_k):
    return sum(min(q0 + block_q, n) // block_k for q0 in range(0, n, block_q))


@pytest.mark.parametrize(("fn", "hint"), [
    (every_tile, "that is every tile"),
    (up_to_first_query, "the block's LAST query"),
    (strictly_before_last_query, "one tile short per query block"),
    (rounded_down, "round up, not down"),
])
def test_tile_mistakes_get_their_hints(fn: Any, hint: str) -> None:
    ok, out = checked("ex18.causal_tiles", fn)
    assert not ok and hint in out, out


def blocks(n: int, block: int) -> int:
    return -(-n // block)


def triangle_without_diagonal(n, block_q, block_k):
    """Square tiles' triangle, off by one: T (T - 1) / 2 leaves out the T tiles on the diagonal."""
    t = blocks(n, block_q)
    return t * (t - 1) // 2


def triangle_with_diagonal_twice(n, block_q, block_k):
    """Square tiles' triangle plus the diagonal again: T (T + 1) / 2 + T."""
    t = blocks(n, block_q)
    return t * (t + 1) // 2 + t


def loop_with_diagonal_twice(n, block_q, block_k):
    """A loop over the blocks that counts every tile the diagonal crosses twice."""
    total = 0
    for q0 in range(0, n, block_q):
        last = min(q0 + block_q, n) - 1
        for k0 in range(0, n, block_k):
            if k0 <= last:
                total += 1 + (min(k0 + block_k, n) - 1 > q0)
    return total


def square_triangle(n, block_q, block_k):
    """T (T + 1) / 2: right for square tiles only (the first case passes)."""
    t = blocks(n, block_q)
    return t * (t + 1) // 2


# Issue 44: a triangular formula off by one got a generic hint ("exactly 1/2 of the expected
# one", "1 more than expected"); these say which tiles (the diagonal ones) were missed or
# counted twice, or that the triangle holds for square tiles only.
TRIANGLES = [  # (mistake, the case whose hint check() shows, the hint, on the hidden cases)
    (triangle_without_diagonal, 1, "the diagonal tiles are missing", False),
    # On 3 x 3 square tiles (the first visible case) it is also every tile: one hint says both.
    (triangle_with_diagonal_twice, 1, "the diagonal ones counted twice", False),
    (loop_with_diagonal_twice, 1, "the diagonal ones counted twice", False),
    (loop_with_diagonal_twice, 1, "the diagonal tiles are counted twice", True),  # the grader's
    (square_triangle, 2, "a triangle of square tiles", False),
]


@pytest.mark.parametrize(("fn", "case", "hint", "hidden"), TRIANGLES,
                         ids=[f"{t[0].__name__}-{t[3]}" for t in TRIANGLES])
def test_triangle_mistakes_name_the_diagonal_tiles(fn: Any, case: int, hint: str,
                                                   hidden: bool) -> None:
    ok, out = checked("ex18.causal_tiles", fn, hidden=hidden)
    assert not ok and f"✗ case {case} of " in out and hint in out, out
    assert "once too often" not in out and "than expected" not in out, out


VISIBLE = [t for t in TRIANGLES if not t[3]]


@pytest.mark.parametrize(("fn", "case", "hint", "hidden"), VISIBLE,
                         ids=[t[0].__name__ for t in VISIBLE])
def test_triangle_hints_ship_in_what_students_have(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch, fn: Any,
                                                   case: int, hint: str, hidden: bool) -> None:
    """The same hints from the release `edu-dl assign` makes (frozen values, no oracle): in a
    student's check(), and in the judge that validate (and grade) run on the results."""
    monkeypatch.chdir(fresh_release(tmp_path, "ex18"))
    ok, out = checked("ex18.causal_tiles", fn)
    assert not ok and f"✗ case {case} of " in out and hint in out, out
    part = parts.get("ex18.causal_tiles", local=True)
    cases = [args for args, _ in release.visible_cases(part)]
    judged = judge.judge_part(part, cases, [part.call(fn, args) for args in cases])
    assert hint in judged.message and ":Mistake" in judged.hints, judged


def test_every_tile_hint_is_shown_by_some_mistake() -> None:
    """No tile hint is dead text."""
    shown = ["that is every tile", "the block's LAST query", "one tile short per query block",
             "round up, not down"] + [hint for _, _, hint, _ in TRIANGLES]
    for hint in course_part("ex18.causal_tiles").hints:
        assert any(text in hint.message for text in shown), hint.message


# --------------------------------------------------------------------------- 3. the backward pass


def backward(q, k, v, dout, causal, softmax="full", scaled=True, mask=True, dk_rows=False,
             dv_forward=False):
    scale = 1 / math.sqrt(q.shape[1]) if scaled else 1.0
    s = q @ k.T / math.sqrt(q.shape[1])
    if causal and mask:
        s = s + np.triu(np.full(s.shape, -np.inf), 1)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    dp = dout @ v.T
    ds = {"full": p * (dp - (dp * p).sum(axis=1, keepdims=True)), "diagonal": p * (1 - p) * dp,
          "none": p * dp}[softmax]
    dk = (ds @ q if dk_rows else ds.T @ q) * scale
    return ds @ k * scale, dk, (p @ dout if dv_forward else p.T @ dout)


@pytest.mark.parametrize(("options", "output", "hint"), [
    ({"scaled": False}, "output 0 (dq)", "your dq is sqrt(d) times too large"),
    ({"mask": False}, "output 0 (dq)", "lets queries attend to future keys"),
    ({"softmax": "diagonal"}, "output 0 (dq)", "softmax's Jacobian is not diagonal"),
    ({"softmax": "none"}, "output 0 (dq)", "softmax's Jacobian is not diagonal"),
    ({"dk_rows": True}, "output 1 (dk)", "your dk collects over the wrong axis"),
    ({"dv_forward": True}, "output 2 (dv)", "your dv is P applied the wrong way round"),
])
def test_backward_mistakes_get_their_hints(options: dict[str, Any], output: str,
                                           hint: str) -> None:
    def wrong(q, k, v, dout, causal):
        return backward(q, k, v, dout, causal, **options)

    ok, out = checked("ex18.attention_backward", wrong)
    assert not ok and hint in out, out
    assert output in out, out


def test_the_reference_backward_here_is_right() -> None:
    """The replays above differ from a correct backward pass by one step only."""
    assert checked("ex18.attention_backward", backward)[0]
    assert checked("ex18.attention_backward", backward, hidden=True)[0]


@pytest.mark.parametrize("part_id", list(FUNCTIONS))
def test_a_correct_answer_gets_no_hint(part_id: str) -> None:
    assert_no_hint_for(part_id, FUNCTIONS[part_id])


AUTOGRAD = '''def attention_backward(q, k, v, dout, causal):
    import torch
    t = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
    out = torch.nn.functional.scaled_dot_product_attention(*t, is_causal=causal)
    out.backward(torch.tensor(dout))
    return tuple(x.grad.numpy() for x in t)
'''


def test_an_autograd_engine_is_refused() -> None:
    """Right values from torch.autograd score nothing: the grader reads the source."""
    part = course_part("ex18.attention_backward")
    cases = part.cases(np.random.default_rng(0), False)
    got = [part.expected(*c) for c in cases]
    status, message = judge.judge(part, cases, got, AUTOGRAD)
    assert status != "passed" and "asks an autograd engine" in message


# --------------------------------------------------------------------------- nothing re-typed


def test_no_solution_is_lecture_code_retyped() -> None:
    """Issue 25: no two consecutive lines of a solution appear together in a lecture (13's
    tiled attention included) or in edu_dl (edu_dl.attention's online softmax included)."""
    # the parts, and the predictions asked before a cell measures (answers kept out of the release)
    assert_nothing_retyped(NOTEBOOK, {"merge_partials", "causal_tiles", "attention_backward",
                                      "attention",  # mytorch/attention.py's op on the tape
                           "predict_merge_order", "predict_tile_share", "predict_row_term"},
                           lecture="18_attention")
