"""The course's static programs (``edu_dl.graph``), rebuilt small: which of them the Session fuses.

Each builder writes one program as a lecture, exercise solution or twin writes it, on small
seeded data, and returns an open Session (``optimize='numpy'``), its fetches and feed. ``survey``
runs each twice (the first run plans and tries to fuse) and says for each whether its plan
fused, or the reason the fusion gave. ``edu-dl bench plan`` reports the table.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from edu_dl import graph as eg
from edu_dl.autograd import fusion
from edu_dl.util.tables import markdown_table

Program = tuple[Any, list[Any], dict[Any, Any]]  # an open Session, its fetches, its feed
R = np.random.default_rng  # each builder seeds its own


def _session(g: Any, init: Any = None) -> Any:
    sess = eg.Session(g, optimize="numpy")
    if init is not None:
        sess.run(init)
    return sess


def gates(dtype: Any = eg.float32) -> Program:
    """Computational graphs: c = sum(x * y + z) and its gradients (the exercise adds * w)."""
    r = R(0)
    g = eg.Graph()
    with g.as_default():
        x, y, z = (eg.placeholder(dtype, shape=(3, 4), name=n) for n in "xyz")
        c = eg.reduce_sum(x * y + z)
        grads = eg.gradients(c, [x, y, z])
    feed = {p: r.standard_normal((3, 4)).astype(dtype) for p in (x, y, z)}
    return _session(g), [c, *grads], feed


def four_input(dtype: Any = eg.float32) -> Program:
    """Computational graphs' exercise: the gradients of f = sum((x * y + z) * w)."""
    r = R(1)
    g = eg.Graph()
    with g.as_default():
        xs = [eg.placeholder(dtype, shape=(2, 3)) for _ in range(4)]
        f = eg.reduce_sum((xs[0] * xs[1] + xs[2]) * xs[3])
        grads = eg.gradients(f, xs)
    return _session(g), grads, {p: r.standard_normal((2, 3)).astype(dtype) for p in xs}


def _two_layer(weights: str, update: str = "", loss: str = "mean_row_sum") -> Program:
    """TensorFlow's lecture, float64: weights fed as placeholders, or Variables updated by
    ``update``: 'assign' (w.assign(w - lr * grad)), 'minimize' (GradientDescentOptimizer),
    'momentum' (velocity Variables, assign), 'adam' (AdamOptimizer)."""
    r = R(2)
    n, d, h = 8, 6, 5
    data = {"X": r.standard_normal((n, d)), "Y": r.standard_normal((n, d)),
            "w1": r.standard_normal((d, h)) / np.sqrt(d), "w2": r.standard_normal((h, d)) / 3}
    lr = 1e-3
    g = eg.Graph()
    with g.as_default():
        x = eg.placeholder(eg.float64, shape=(n, d))
        y = eg.placeholder(eg.float64, shape=(n, d))
        w1: Any
        w2: Any
        if weights == "fed":
            w1 = eg.placeholder(eg.float64, shape=(d, h))
            w2 = eg.placeholder(eg.float64, shape=(h, d))
        else:
            w1, w2 = eg.Variable(data["w1"]), eg.Variable(data["w2"])
        scores = eg.matmul(eg.maximum(eg.matmul(x, w1), 0), w2)
        if loss == "softmax_ce":
            labels = eg.placeholder(eg.int64, shape=(n,))
            value = eg.reduce_mean(eg.nn.sparse_softmax_cross_entropy_with_logits(
                labels=labels, logits=scores))
        else:
            value = eg.reduce_mean(eg.reduce_sum((scores - y) ** 2, axis=1))
        grads: list[Any] = eg.gradients(value, [w1, w2])
        if weights == "fed":
            fetches = [value, *grads]
        elif update == "assign":
            fetches = [value, eg.group(w1.assign(w1 - lr * grads[0]),
                                       w2.assign(w2 - lr * grads[1]))]
        elif update == "momentum":
            steps = []
            for w, grad in zip((w1, w2), grads):
                v = eg.Variable(np.zeros(w.shape), trainable=False)
                v_next = 0.9 * v + grad
                steps += [v.assign(v_next), w.assign(w - lr * v_next)]
            fetches = [value, eg.group(*steps)]
        elif update == "adam":
            fetches = [value, eg.train.AdamOptimizer(lr).minimize(value)]
        else:
            fetches = [value, eg.train.GradientDescentOptimizer(lr).minimize(value)]
        init = eg.global_variables_initializer() if weights != "fed" else None
    feed: dict[Any, Any] = {x: data["X"], y: data["Y"]}
    if weights == "fed":
        feed.update({w1: data["w1"], w2: data["w2"]})
    if loss == "softmax_ce":
        feed = {x: data["X"], labels: r.integers(0, d, n)}
    return _session(g, init), fetches, feed


def rnn(T: int = 4) -> Program:
    """Static versus dynamic: the RNN unrolled at build time (tanh, a slice per step)."""
    r = R(3)
    D, H = 3, 4
    g = eg.Graph()
    with g.as_default():
        X = eg.placeholder(eg.float64, shape=(T, D))
        W, U = eg.Variable(r.standard_normal((H, H)) / 2), eg.Variable(r.standard_normal((D, H)))
        h = eg.constant(np.zeros((1, H)))
        for t in range(T):
            h = eg.tanh(eg.matmul(h, W) + eg.matmul(X[t:t + 1], U))
        loss = eg.reduce_sum(h * h)
        grads = eg.gradients(loss, [W, U])
        init = eg.global_variables_initializer()
    return _session(g, init), [loss, *grads], {X: r.standard_normal((T, D))}


def pruned_and_folded() -> Program:
    """Static versus dynamic: a cheap fetch beside an expensive branch, x @ (A @ B) folded."""
    r = R(4)
    d = 8
    g = eg.Graph()
    with g.as_default():
        x = eg.placeholder(eg.float32, shape=(None, d))
        cheap = eg.reduce_sum(x)
        folded = eg.reduce_sum(eg.matmul(x, eg.matmul(
            eg.constant(r.standard_normal((d, d)).astype(np.float32)),
            eg.constant(r.standard_normal((d, d)).astype(np.float32)))))
    return _session(g), [cheap, folded], {x: r.standard_normal((4, d)).astype(np.float32)}


def planned_step() -> Program:
    """The benchmarks' static twin (``twins.edu_static``) at the tiny size, float32."""
    from edu_dl.models import spec as models
    from edu_dl.twins import edu_static

    p = models.sized("tiny").problem(np.float32)
    return _from_stepper(edu_static.make_step(p.spec, p.X, p.Y, p.weights, p.spec.lr("sgd"),
                                              "sgd", optimize="numpy"))


def _from_stepper(step: Any) -> Program:
    """A twin's Stepper as (Session, fetches, feed): its step function's closure holds them."""
    cells = dict(zip(step.step.__code__.co_freevars,
                     (c.cell_contents for c in step.step.__closure__ or ())))
    return cells["sess"], [cells["loss"], cells["train_op"]], cells["feed"]


@dataclass(frozen=True)
class CourseProgram:
    """A static program of the course: its name, where the course writes it (in words), how to
    build it small, and the notebooks (stems) that open an ``edu_dl.graph`` Session on it;
    ``tests/bench/test_course_programs.py`` checks that every such notebook is named here."""

    name: str
    where: str
    build: Callable[[], Program]
    notebooks: tuple[str, ...] = ()


PROGRAMS: tuple[CourseProgram, ...] = (
    CourseProgram("c = sum(x * y + z), its gradients", "computational graphs; static vs dynamic",
                  gates, ("07_computational_graphs", "12_static_vs_dynamic")),
    CourseProgram("gradients of sum((x * y + z) * w)", "computational graphs' exercise",
                  four_input, ("07_computational_graphs",)),
    CourseProgram("two-layer net, weights fed", "TensorFlow lecture", lambda: _two_layer("fed"),
                  ("09_tensorflow",)),
    CourseProgram("two-layer net, w.assign(w - lr * grad)", "TensorFlow lecture",
                  lambda: _two_layer("variables", "assign"), ("09_tensorflow",)),
    CourseProgram("two-layer net, GradientDescentOptimizer", "TensorFlow lecture",
                  lambda: _two_layer("variables", "minimize"), ("09_tensorflow",)),
    CourseProgram("two-layer net, momentum with Variables",
                  "TensorFlow exercise's momentum, in edu_dl.graph",
                  lambda: _two_layer("variables", "momentum")),
    CourseProgram("two-layer net, AdamOptimizer", "the static twin's Adam",
                  lambda: _two_layer("variables", "adam")),
    CourseProgram("two-layer net, softmax cross-entropy", "the static twin's classifier",
                  lambda: _two_layer("variables", "minimize", "softmax_ce")),
    CourseProgram("the RNN unrolled", "static vs dynamic; its exercise", rnn,
                  ("12_static_vs_dynamic",)),
    CourseProgram("pruning and constant folding", "static vs dynamic", pruned_and_folded,
                  ("12_static_vs_dynamic",)),
    CourseProgram("the benchmarks' planned step", "static vs dynamic; bench engine",
                  planned_step, ("12_static_vs_dynamic",)),
)


def survey(programs: tuple[CourseProgram, ...] = PROGRAMS) -> list[tuple[CourseProgram, str]]:
    """(program, '' where its plan fused, else the reason) for each program."""
    out = []
    for program in programs:
        sess, fetches, feed = program.build()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", fusion.UnfusedPlanWarning)
            for _ in range(2):
                sess.run(fetches, feed_dict=feed)
        plan = sess.plan_for(fetches, feed)
        out.append((program, "" if plan.fused is not None else plan.unfused_reason))
        sess.close()
    return out


def survey_markdown(results: list[tuple[CourseProgram, str]]) -> str:
    """The survey as Markdown: how many of the course's static programs fuse, then a row per
    program (where the course writes it, whether it fused, the reason it did not)."""
    fused = sum(not reason for _, reason in results)
    rows = [[p.name, p.where, "yes" if not reason else "no", reason or "—"]
            for p, reason in results]
    return "\n".join([
        "## The course's static programs: which fuse",
        "",
        f"{fused} of the {len(results)} static programs of the course (rebuilt small; "
        "`Session(optimize='numpy')`, two runs) fuse; for each that does not, the reason the "
        "fusion gives (the Session warns with it when asked to optimize).",
        "",
        *markdown_table(["program", "where", "fused", "why not"], rows,
                        [False, False, False, False]),
    ]) + "\n"
