"""Exercise 10 (PyTorch): the solutions pass every case, typical mistakes get specific messages.

The solutions are taken from solutions/10_pytorch.ipynb itself (its setup and solution cells are
executed), so these tests follow the notebook.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import numpy as np
import pytest
from fixtures.exercise_helpers import course_module, course_part, run_check, solution_namespace
from fixtures.frameworks import torch

from edu_dl.grading.trust.source import find_source

pytestmark = pytest.mark.usefixtures("in_solutions")  # check() finds ./parts there

NOTEBOOK = Path(__file__).resolve().parents[2] / "solutions" / "10_pytorch.ipynb"
PART_SOLUTIONS = {
    "ex10.manual_biases": "train_manual_biases",
    "ex10.linear_function": "MyLinear",
    "ex10.residual_module": "ResidualBlock",
    "ex10.adam_accumulation": "train_adam_accumulated",
    # section 5: the student's own framework, mytorch/nn.py (the reference: solutions/mytorch)
    "ex10.my_linear": "Linear",
    "ex10.my_cross_entropy": "cross_entropy",
    "ex10.my_sgd": "SGD",
    "ex10.my_train_step": "train_step",
}


@pytest.fixture(scope="session")  # see tests/README.md: "Fixtures"
def sol():
    """The notebook's setup and solution cells, executed: its functions by name."""
    return solution_namespace("10_pytorch.ipynb")


run = run_check


def test_points_match_the_notebook():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    points = {c.source.split('"')[1]: c.metadata.nbgrader["points"] for c in nb.cells
              if c.metadata.get("nbgrader", {}).get("grade")}
    assert points == {pid: course_part(pid).points for pid in PART_SOLUTIONS}


def test_solutions_pass_through_check(capsys, sol):
    for part_id, name in PART_SOLUTIONS.items():
        ok, out = run(capsys, part_id, sol[name], hidden=True)
        assert ok, out
        assert out == f"✓ {part_id}: 4 hidden cases passed\n"


def test_the_inputs_are_not_modified(sol):
    """The solution clones: the check copies the inputs anyway, but the notebook says so."""
    args = course_part("ex10.manual_biases").cases(np.random.default_rng(0), False)[0]
    tensors = [torch.tensor(a) if isinstance(a, np.ndarray) else a for a in args]
    before = [t.clone() for t in tensors[:6]]
    sol["train_manual_biases"](*tensors)
    assert all(torch.equal(a, b) for a, b in zip(before, tensors[:6]))


# ----------------------------------------------------------------------------- typical mistakes


def manual(X, y, w1, b1, w2, b2, lr, num_steps, mistake=None):
    """Gradient descent on the net with biases, written independently of the solution, with one
    typical mistake switched on."""
    if mistake == "no_biases":
        b1, b2 = torch.zeros_like(b1), torch.zeros_like(b2)
    losses = []
    for _ in range(num_steps):
        pre = X @ w1 + b1
        h = torch.relu(pre)
        diff = h @ w2 + b2 - y
        losses.append((diff ** 2).sum().item())
        g_out = 2 * diff
        g_h = g_out @ w2.T
        g_pre = torch.where(pre > 0, g_h, 0.0)
        db1 = (g_h if mistake == "unmasked_db1" else g_pre).sum(0)
        db2 = g_out.sum(0)
        if mistake == "mean_db":
            db1, db2 = db1 / len(X), db2 / len(X)
        w1, w2 = w1 - lr * (X.T @ g_pre), w2 - lr * (h.T @ g_out)
        if mistake not in ("no_biases", "frozen_biases"):
            b1, b2 = b1 - lr * db1, b2 - lr * db2
    return losses


HINTS = ("hint: those are the lecture's net's losses, without biases", "hint: the biases never "
         "move", "hint: a bias gradient SUMS over the batch's rows", "hint: b1's gradient goes "
         "through the ReLU")


@pytest.mark.parametrize(("mistake", "hint"), [
    (None, None),
    ("no_biases", HINTS[0]),
    ("frozen_biases", HINTS[1]),
    ("mean_db", HINTS[2]),
    ("unmasked_db1", HINTS[3]),
])
def test_bias_mistakes_get_their_hint(capsys, mistake, hint):
    for hidden in (False, True):
        ok, out = run(capsys, "ex10.manual_biases", lambda *a: manual(*a, mistake=mistake),
                      hidden=hidden)
        if hint is None:  # an independent right answer passes and no hint speaks
            assert ok and "hint" not in out, out
            continue
        assert not ok, out
        assert hint in out, out
        assert [h for h in HINTS if h in out] == [hint], out  # the others stay quiet


def test_autograd_is_switched_off_in_the_manual_part(capsys):
    def with_autograd(X, y, w1_init, b1_init, w2_init, b2_init, lr, num_steps):
        w1, w2 = w1_init.clone().requires_grad_(), w2_init.clone().requires_grad_()
        loss = ((X @ w1 + b1_init).clamp(min=0) @ w2 + b2_init - y).pow(2).sum()
        loss.backward()
        return [loss.item()]

    ok, out = run(capsys, "ex10.manual_biases", with_autograd)
    assert not ok
    assert "case 1 of 3" in out and "RuntimeError: element 0 of tensors does not require grad" \
        in out
    assert "this part runs with autograd switched off" in out


def linear_function(backward):
    class MyLinear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, b):
            ctx.save_for_backward(x, w)
            return x @ w + b

    MyLinear.backward = staticmethod(backward)
    return MyLinear


def test_bias_gradient_averaged(capsys):
    def mean_db(ctx, g):
        x, w = ctx.saved_tensors
        return g @ w.t(), x.t() @ g, g.mean(0)

    ok, out = run(capsys, "ex10.linear_function", linear_function(mean_db))
    assert not ok
    assert "case 1 of 3 (x (2, 3), w (3, 4), b (4,), grad_output (2, 4)): output 3 (db)" in out
    assert "hint: db SUMS grad_output over the batch" in out


def test_missing_transpose_shows_in_the_square_case(capsys):
    def no_transpose(ctx, g):
        x, w = ctx.saved_tensors
        dx = g @ w if w.shape[0] == w.shape[1] else g @ w.t()  # wrong only where shapes hide it
        return dx, x.t() @ g, g.sum(0)

    ok, out = run(capsys, "ex10.linear_function", linear_function(no_transpose))
    assert not ok
    assert "case 3 of 3" in out and "output 1 (dx)" in out and "dx = grad_output @ w.T" in out


def test_wrong_number_or_shape_of_gradients(capsys):
    def two_grads(ctx, g):
        x, w = ctx.saved_tensors
        return g @ w.t(), x.t() @ g

    ok, out = run(capsys, "ex10.linear_function", linear_function(two_grads))
    assert not ok
    assert "incorrect number of gradients" in out and "hint: backward returns one gradient" in out

    def transposed_dw(ctx, g):
        x, w = ctx.saved_tensors
        return g @ w.t(), g.t() @ x, g.sum(0)

    ok, out = run(capsys, "ex10.linear_function", linear_function(transposed_dw))
    assert not ok
    assert "invalid gradient at index 1" in out and "dw (D, M)" in out


def test_backward_that_asks_autograd_fails_the_source_check(capsys):
    """The oracle is autograd through x @ w + b: a backward that asks autograd for the gradients
    returns the right values without any rule of the student's; its source fails the part."""
    class MyLinear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, b):
            ctx.save_for_backward(x, w, b)
            return x @ w + b

        @staticmethod
        def backward(ctx, grad_output):
            inputs = [t.detach().requires_grad_() for t in ctx.saved_tensors]
            with torch.enable_grad():
                x, w, b = inputs
                out = x @ w + b
            return torch.autograd.grad(out, inputs, grad_output)

    ok, out = run(capsys, "ex10.linear_function", MyLinear)
    assert not ok
    assert out == ("✗ ex10.linear_function: the values are right, but this part asks you to "
                   "write the gradients yourself: MyLinear's backward asks autograd for them "
                   "(torch.autograd.grad, .grad, requires_grad, enable_grad); return dx, dw and "
                   "db computed from grad_output and the saved tensors (lecture 8's VJP rules)\n")
    part = course_part("ex10.linear_function")
    solution = find_source(nbformat.read(NOTEBOOK, as_version=4), part.id)
    assert solution is not None and part.source_check is not None
    assert part.source_check(solution).ok


def test_not_a_function_subclass(capsys):
    ok, out = run(capsys, "ex10.linear_function", torch.nn.Linear)
    assert not ok and "must be a subclass of torch.autograd.Function" in out


def Block(d, h, mistake=None, bias=True):
    """The residual block, written independently of the solution, with a typical mistake (a
    factory: a class of torch's at module level would import torch at collection)."""

    class Residual(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear1 = torch.nn.Linear(d, h, bias=bias)
            self.linear2 = torch.nn.Linear(h, d)
            if mistake != "default_init":
                with torch.no_grad():
                    self.linear2.weight.zero_()
                    self.linear2.bias.zero_()

        def forward(self, x):
            inner = self.linear1(x) if mistake == "no_relu" else self.linear1(x).clamp(min=0)
            branch = self.linear2(inner)
            if mistake == "no_skip":
                return branch
            return (x + branch).clamp(min=0) if mistake == "relu_after" else x + branch

    return Residual()


@pytest.mark.parametrize(("mistake", "hint"), [
    (None, None),
    ("default_init", "hint: the block as built is not the identity"),
    ("no_skip", "hint: the block adds its input to what the two layers make"),
    ("relu_after", "hint: no ReLU after the sum"),
    ("no_relu", "hint: apply the ReLU between the layers"),
])
def test_module_mistakes_get_their_hint(capsys, mistake, hint):
    for hidden in (False, True):
        ok, out = run(capsys, "ex10.residual_module",
                      lambda d, h: Block(d, h, mistake), hidden=hidden)
        if hint is None:
            assert ok and "hint" not in out, out
            continue
        assert not ok and hint in out, out


def test_module_with_wrong_layers(capsys):
    ok, out = run(capsys, "ex10.residual_module", lambda d, h: Block(d, h, bias=False))
    assert not ok
    assert "should hold two layers, nn.Linear(4, 5) and nn.Linear(5, 4), with biases; found: " \
           "Linear(4, 5, bias=False), Linear(5, 4, bias=True)" in out


def adam(X, y, W1, b1, W2, b2, lr, num_steps, micro_batch, weighting="rows", zero="step",
         step_each_micro=False, twice=False, whole_batch=False, functional=False):
    """Accumulating Adam in torch on the mean loss, with a mistake: weighting = "rows" (right),
    "none", "count" or "sum"; zero = "step" (right), "never" or "micro"; ..."""
    model = torch.nn.Sequential(torch.nn.Linear(W1.shape[1], W1.shape[0]), torch.nn.ReLU(),
                                torch.nn.Linear(W2.shape[1], W2.shape[0])).double()
    with torch.no_grad():
        for p, value in zip(model.parameters(), (W1, b1, W2, b2)):
            p.copy_(value)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    size = len(X) if whole_batch else micro_batch

    def forward(x):
        if functional:  # the same numbers without calling any nn.Module
            h = torch.nn.functional.linear(x, model[0].weight, model[0].bias).clamp(min=0)
            return torch.nn.functional.linear(h, model[2].weight, model[2].bias)
        return model(x)

    losses = []
    for _ in range(num_steps):
        if zero == "step":
            optimizer.zero_grad()
        total = 0.0
        for start in range(0, len(X), size):
            if zero == "micro" or step_each_micro:
                optimizer.zero_grad()
            rows = slice(start, start + size)
            n_rows, count = len(X[rows]), -(-len(X) // size)
            loss = torch.nn.functional.mse_loss(
                forward(X[rows]), y[rows], reduction="sum" if weighting == "sum" else "mean")
            loss = loss * {"rows": n_rows / len(X), "count": 1 / count}.get(weighting, 1.0)
            total += loss.item()
            loss.backward()
            if step_each_micro:
                optimizer.step()
        if not step_each_micro:
            optimizer.step()
        if twice:  # the source's listing: a manual update after Adam's
            with torch.no_grad():
                for p in model.parameters():
                    p -= lr * p.grad
        losses.append(total)
    return losses


@pytest.mark.parametrize(("kwargs", "hint"), [
    ({"weighting": "sum"}, "hint: those are the summed squared error's losses"),
    ({"weighting": "none"}, "hint: you added the micro-batches' means"),
    ({"weighting": "count"}, "hint: you divided by the number of micro-batches"),
    ({"zero": "never"}, "hint: the gradients pile up from one step to the next"),
    ({"zero": "micro"}, "hint: only the last micro-batch's gradient reached the step"),
    ({"step_each_micro": True}, "hint: you took one Adam step per micro-batch"),
    ({"twice": True}, "hint: every weight moves twice per step"),
    ({"whole_batch": True}, "hint: the model saw the whole batch at once"),
    ({"functional": True}, "hint: no torch.nn.Module ran a forward pass"),
])
def test_adam_mistakes(capsys, kwargs, hint):
    ok, out = run(capsys, "ex10.adam_accumulation", lambda *a: adam(*a, **kwargs))
    assert not ok
    assert "case 1 of 2 (X (8, 6), y (8, 3), W1 (5, 6)" in out and hint in out


def test_adam_without_mistake_passes_and_no_hint_fires(capsys):
    """The torch helper without a mistake is right, so every hint above stays quiet on it."""
    ok, out = run(capsys, "ex10.adam_accumulation", adam)
    assert ok and "hint" not in out, out


def test_adam_whole_batch_is_the_only_difference_the_values_miss():
    """Running the whole batch at once gives the right losses (the batch's mean): only the recorded
    row count tells it apart, which check() reports (feedback: observed in the sandbox)."""
    part = course_part("ex10.adam_accumulation")
    for args in part.cases(np.random.default_rng(7), True):
        tensors = [torch.tensor(a) if isinstance(a, np.ndarray) else a for a in args]
        losses, rows = part.call(lambda *a: adam(*a, whole_batch=True), args)
        want_losses, want_rows = part.expected(*args)
        assert np.allclose(losses, want_losses, rtol=1e-9, atol=1e-12)
        assert int(rows) == len(args[0]) and int(want_rows) == min(args[8], len(args[0]))
        assert np.allclose(adam(*tensors), want_losses, rtol=1e-9, atol=1e-12)


def test_adam_reference_matches_torch():
    """The hints' NumPy Adam is PyTorch's, mistakes included: each replay gives the torch loop's
    losses with the same mistake."""
    numpy_adam_losses = course_module("ex10").numpy_adam_losses

    part = course_part("ex10.adam_accumulation")
    pairs = [({}, {}), ({"weighting": "none"}, {"weighting": "none"}),
             ({"weighting": "count"}, {"weighting": "count"}),
             ({"weighting": "sum"}, {"weighting": "sum"}),
             ({"zero_grad": False}, {"zero": "never"}),
             ({"zero_each_micro": True}, {"zero": "micro"}),
             ({"step_each_micro": True}, {"step_each_micro": True})]
    for args in part.cases(np.random.default_rng(5), True):
        tensors = [torch.tensor(a) if isinstance(a, np.ndarray) else a for a in args]
        for replay, mistake in pairs:
            assert np.allclose(numpy_adam_losses(*args, **replay), adam(*tensors, **mistake),
                               rtol=1e-9, atol=1e-12), replay


# A function-shaped part's stub is checked for every part in test_parts_trusted.py; these two
# parts take a class, and the notebook's stub is a class whose methods raise.
@pytest.mark.parametrize("part_id", ["ex10.linear_function", "ex10.residual_module"])
def test_a_stub_class_is_not_implemented_yet(capsys, part_id):
    class StubFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, b):
            raise NotImplementedError()

        @staticmethod
        def backward(ctx, grad_output):
            raise NotImplementedError()

    class StubModule(torch.nn.Module):
        def __init__(self, d, h):
            super().__init__()
            raise NotImplementedError()

    fn = {"ex10.linear_function": StubFunction, "ex10.residual_module": StubModule}[part_id]
    ok, out = run(capsys, part_id, fn)
    assert not ok and out == f"✗ {part_id}: not implemented yet\n"
