"""Every grade is judged outside the student's process (issue 10, items 3 to 5).

For every part of every exercise: a submission whose function breaks what the part grades, with
the in-sandbox ``call`` bypassed (the recorded result is the raw return of the function, or
values and flags forged to look perfect, as a notebook that patches ``Part.call`` records them),
scores 0 in ``judge.judge`` with the source ``trust.source.find_source`` reads from the notebook;
the solution notebook's function, recorded the honest way, passes. Plus the named cases of the
issue.
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import pytest
from fixtures.exercise_helpers import (
    SIMULATED_SOLUTIONS,
    all_course_parts,
    assert_solution_passes,
    course_module,
    course_part,
    run_check,
    solution_namespace,
    solution_package,
)

from edu_dl.grading import check, checking, protocol
from edu_dl.grading.authoring import source, spec
from edu_dl.grading.nbgrader import is_solution
from edu_dl.grading.notebooks import Notebook
from edu_dl.grading.stages import judge, load, prepare
from edu_dl.grading.trust import source as trusted_source

pytestmark = pytest.mark.usefixtures("in_solutions")  # check() finds ./parts there

SOLUTIONS = Path(__file__).resolve().parents[2] / "solutions"
# Exercise NN's parts are exNN.*: its solutions notebook is the one numbered NN.
NOTEBOOKS = {f"ex{p.name[:2]}": p.name for p in sorted(SOLUTIONS.glob("[0-9][0-9]_*.ipynb"))}
ALSO = {"ex13": "def parse_layer"}  # given helpers the solution functions use
ALL_PARTS = all_course_parts()


def find_source(nb: Notebook, part_id: str) -> str | None:
    """The trusted side's source, with the reference package beside the solutions as a
    student's package is read (a name the notebook imports from mytorch is found there)."""
    return trusted_source.find_source(nb, part_id, solution_package())


def module_of(part_id: str) -> str:
    """The key of the solution notebook that checks ``part_id`` (in NOTEBOOKS)."""
    return part_id.split(".")[0]


def solution_notebook(module: str) -> Notebook:
    return nbformat.read(SOLUTIONS / NOTEBOOKS[module], as_version=4)


def part_notebook(part_id: str) -> Notebook:
    """The solution notebook whose test cell checks ``part_id``."""
    name = NOTEBOOKS[module_of(part_id)]
    return nbformat.read(SOLUTIONS / name, as_version=4)


def namespace(module: str) -> dict[str, Any]:
    return solution_namespace(NOTEBOOKS[module], also=ALSO.get(module, ""))


def part_namespace(part_id: str) -> dict[str, Any]:
    module = module_of(part_id)
    return solution_namespace(NOTEBOOKS[module], also=ALSO.get(module, ""))


def checked_name(nb: Notebook, part_id: str) -> str:
    for cell in nb.cells:
        name = (trusted_source.checked_name(cell.source, part_id) if cell.cell_type == "code"
                else None)
        if name:
            return name
    raise AssertionError(f"no test cell checks {part_id}")


def with_solution(nb: Notebook, name: str, text: str) -> Notebook:
    """The notebook with the solution cell that defines ``name`` replaced by ``text`` (where
    the notebook imports ``name`` from the student's package: the cell that imports it)."""
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        if cell.cell_type == "code" and is_solution(cell) and \
                trusted_source.definition([cell], name) is not None:
            cell.source = text
            return nb
    for cell in nb.cells:  # the student's own package: the cell that imports it from there
        if cell.cell_type == "code" and re.match(rf"from mytorch\.\w+ import [^#\n]*\b{name}\b",
                                                 cell.source):
            cell.source = text
            return nb
    raise AssertionError(f"no solution cell defines {name}")


def draw(part: spec.Part, seed: int = 7) -> list[tuple[Any, ...]]:
    """The grader's draw: visible and hidden cases from one secret seed, as the judge reads them
    (the given values as the npz delivers them, a withheld one as drawn)."""
    rng = np.random.default_rng(seed)
    return spec.judged_cases([*part.cases(rng, False), *part.cases(rng, True)])


def wire(tmp_path: Path, results: list[Any]) -> list[Any]:
    """Results as the grader reads them back from the sandbox's npz file."""
    arrays: dict[str, np.ndarray] = {"hidden": np.array(False),
                                     "n_cases": np.array(len(results))}
    for i, result in enumerate(results):
        arrays.update(checking._encode_result(i, result))
    path = tmp_path / f"outputs-{len(list(tmp_path.glob('outputs-*')))}.npz"
    with open(path, "wb") as f:
        protocol.savez(f, arrays)
    return protocol.read_outputs(path)[1]


def write_grading_files(root: Path, part: spec.Part, cases: list[tuple[Any, ...]]) -> None:
    """What the grader gives the sandbox for a part: its cases (without their withheld values,
    as prepare sends them), and its pickled call=."""
    inputs = protocol.encode_inputs([spec.given(case) for case in cases])
    for name, data in prepare.grading_files(str(root), part.id, inputs,
                                          load.pickled_call(part)).items():
        Path(name).parent.mkdir(parents=True, exist_ok=True)
        Path(name).write_bytes(data)


def recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, part: spec.Part, fn: Any,
             cases: list[tuple[Any, ...]]) -> list[Any]:
    """check() in grading mode, as in the sandbox: the results the grader reads back."""
    root = tmp_path / "grading"
    write_grading_files(root, part, cases)
    monkeypatch.setenv(protocol.GRADING_ENV, str(root))
    try:
        assert check(part.id, fn)
    finally:
        monkeypatch.delenv(protocol.GRADING_ENV)
    (path,) = sorted((root / "outputs").glob(f"{part.id}.*.npz"))[-1:]
    results = protocol.read_outputs(path)[1]
    path.unlink()
    return results


# --------------------------------------------------------------------------- the attacks

FORGED = "forged"  # a patched call records the oracle's values (and perfect flags, counts)
RAW = "raw"  # a patched call records the function's raw return on the drawn arguments

ATTACKS: dict[str, tuple[str, str]] = {
    # ex01: values only
    "ex01.peak_gflops": (RAW, """
def peak_gflops(cores, clock_mhz, simd_bits, fma_units):
    return cores * clock_mhz * 1e6 * (simd_bits / 32) * fma_units / 1e9  # an FMA as 1 FLOP
"""),
    "ex01.choose_gpus": (RAW, """
def choose_gpus(vendors, cuda_cores, memory_gb, bandwidth_gb_s):
    ok = (vendors == "NVIDIA") & (cuda_cores > 1000) & (memory_gb > 8)  # > instead of >=
    rows = np.flatnonzero(ok)
    return rows[np.argsort(-bandwidth_gb_s[rows], kind="stable")]
"""),
    "ex01.pick_device": (RAW, """
def pick_device(cuda_available, device_count, index):
    return f"cuda:{index}" if cuda_available else "cpu"  # any index, even past the last GPU
"""),
    "ex01.machine_peak": (RAW, """
def machine_peak(physical_id, core_id, flags, clock_mhz, fma_units):
    logical = len(physical_id)  # hyperthreads counted as cores
    bits = 512 if "avx512f" in flags.split() else 256 if "avx" in flags.split() else 128
    per_lane = 2 if "fma" in flags.split() else 1
    return logical * clock_mhz * 1e6 * bits / 32 * per_lane * fma_units / 1e9
"""),
    # ex02
    "ex02.gflops": (RAW, """
def gflops(n, seconds):
    return n**3 / seconds / 1e9  # a multiply-add as 1 FLOP
"""),
    "ex02.peak_bandwidth": (RAW, """
def peak_bandwidth(mega_transfers_per_s, bus_width_bytes, channels):
    return mega_transfers_per_s * bus_width_bytes * 8 * channels  # bits
"""),
    "ex02.matmul_intensity": (RAW, """
def matmul_intensity(n, itemsize):
    return 2.0 * n**3 / (2 * n**2 * itemsize)  # C is written too
"""),
    "ex02.softmax_xp": (RAW, """
def softmax(x):  # right values, but NumPy by name: never runs on CuPy
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)
"""),
    "ex02.faster_standardize": (RAW, """
def standardize(images):
    x = images.astype(np.float64)  # statistics per image, not over the whole batch
    mean = x.mean(axis=(1, 2), keepdims=True)
    std = x.std(axis=(1, 2), keepdims=True)
    return ((x - mean) / std).astype(np.float32).transpose(0, 3, 1, 2)
"""),
    # ex03
    "ex03.global_index": (RAW, """
def global_index(block_idx, block_dim, thread_idx):
    return block_idx + thread_idx  # blocks counted as threads
"""),
    "ex03.leaky_relu_kernel": (FORGED, """
def leaky_relu_kernel(x, alpha, out):  # NumPy, not a kernel
    out[:] = np.where(x > 0, x, alpha * x)
"""),
    "ex03.linear_relu": (FORGED, """
def linear_relu_kernel(X, W, b, out):  # NumPy, not a kernel
    out[:] = np.maximum(X @ W + b, 0)
"""),
    "ex03.row_sums": (FORGED, """
def make_row_sum_kernel(threads):
    @cuda.jit
    def row_sums(X, out):  # one thread adds the whole row: no shared memory, no cooperation
        row = cuda.blockIdx.x
        if cuda.threadIdx.x == 0:
            acc = float32(0.0)
            for col in range(X.shape[1]):
                acc += X[row, col]
            out[row] = acc

    return row_sums
"""),
    # ex05
    "ex05.launch_segments": (RAW, """
def launch_segments(block, grid, coefficients, itemsize):
    (bx, by), (gx, gy) = block, grid  # every warp taken as one coalesced row of float32
    return gx * gy * by * -(-bx // 32) * 4
"""),
    "ex05.fused_layer_norm": (FORGED, """
def layer_norm(x, gamma, beta, eps):  # NumPy's passes, not one compiled kernel
    x = x.astype(np.float64)
    mean = x.mean(axis=1, keepdims=True)
    return gamma * (x - mean) / np.sqrt(x.var(axis=1, keepdims=True) + eps) + beta
"""),
    # ex06
    "ex09.feed_bytes": (RAW, """
def feed_bytes(N, D, H, D_out, itemsize):  # elements, not bytes
    return N * D + N * D_out + D * H + H * D_out, 1 + D * H + H * D_out, N * D + N * D_out, 1
"""),
    "ex06.ideal_epoch": (RAW, """
def ideal_epoch(read_s, compute_s, n, readers):  # the steady state only
    return n * (read_s + compute_s) if readers == 0 else n * max(read_s / readers, compute_s)
"""),
    "ex06.prefetch": (FORGED, """
def prefetch(batches, depth):
    yield from batches  # no thread at all
"""),
    "ex06.prefetch_errors": (RAW, """
def prefetch(batches, depth):
    items = []
    try:
        for batch in batches:
            items.append(batch)
    except Exception as exc:
        raise exc  # the batches read before the error are lost
    yield from items
"""),
    "ex06.pipeline_epoch": (RAW, """
def pipeline_epoch(read_s, compute_s, depth):  # the queue never fills: depth ignored
    put = step_end = 0.0
    for read in read_s:
        put += read
        step_end = max(put, step_end) + compute_s
    return step_end
"""),
    # ex07
    "ex07.four_input_backward": (RAW, """
def four_input_backward(x, y, z, w):
    return y, x, np.ones_like(z), x * y + z  # forgot w
"""),
    "ex07.max_fan_out_numpy": (RAW, """
def max_fan_out_numpy(x, y, z):  # the max gate's share of grad_a only: no fan-out sum
    a = x * y
    grad_a = a * (a > z)
    return np.sum(np.maximum(a, z) * a), grad_a * y, grad_a * x, a * (z > a)
"""),
    "ex07.static_graph": (RAW, """
def static_graph(x, y, z):  # right values, by hand in NumPy: no graph, no Session
    a = x * y
    m = np.maximum(a, z)
    grad_a = m + a * (a > z)
    return np.sum(m * a), grad_a * y, grad_a * x, a * (z > a)
"""),
    "ex07.topological_order": (RAW, """
def topological_order(n_nodes, edges):  # every node once, in the BACKWARD order
    from graphlib import TopologicalSorter
    sorter = TopologicalSorter({k: set() for k in range(n_nodes)})
    for src, dst in edges:
        sorter.add(int(dst), int(src))
    return np.array(list(sorter.static_order())[::-1], dtype=np.int64)
"""),
    # ex08: values only
    "ex08.faster_sgd_step": (FORGED, """
def sgd_step(X, y, W, lr=0.1):
    from edu_dl.speed.tasks import sgd_step_reference  # values right, speed run refused
    return sgd_step_reference(X, y, W, lr)
"""),
    "ex08.mul_backward": (RAW, """
def mul_backward(dout, x, y):
    return dout * x, dout * y  # swapped
"""),
    "ex08.relu_backward": (RAW, """
def relu_backward(dout, x):
    return dout * (x >= 0)  # relu'(0) = 1
"""),
    "ex08.unbroadcast": (RAW, """
def unbroadcast(grad, shape):
    return np.asarray(grad).sum(axis=0)  # the first axis, whatever the shape
"""),
    "ex08.tape_ops": (FORGED, """
class Tape:  # right values: every vjp asks torch.autograd
    def __init__(self):
        self.values, self.records = [], []

    def input(self, value):
        self.values.append(np.asarray(value, dtype=np.float64))
        return len(self.values) - 1

    def exp(self, a):
        x = torch.tensor(self.values[a], requires_grad=True)
        out = torch.exp(x)
        self.values.append(out.detach().numpy())
        vjp = lambda g: torch.autograd.grad(out, [x], torch.tensor(g), retain_graph=True)
        self.records.append((len(self.values) - 1, (a,), vjp))
        return len(self.values) - 1
"""),
    "ex08.tape_backward": (RAW, """
def backward(leaves, program, coeffs, dout):  # the raw case: dout to every leaf
    return np.stack([np.asarray(dout, dtype=float)] * len(leaves))
"""),
    "ex08.batchnorm_forward": (RAW, """
def batchnorm_forward(x, gamma, beta, running_mean, running_var, train, momentum, eps):
    mu, var = x.mean(0), x.var(0, ddof=1)  # unbiased variance in the normalisation
    out = gamma * (x - mu) / np.sqrt(var + eps) + beta
    return out, (1 - momentum) * running_mean + momentum * mu, running_var
"""),
    "ex08.batchnorm_backward": (RAW, """
def batchnorm_backward(dout, x, gamma, eps):  # the path through the batch statistics missing
    std = np.sqrt(x.var(0) + eps)
    return dout * gamma / std, (dout * (x - x.mean(0)) / std).sum(0), dout.sum(0)
"""),
    "ex08.dropout_forward": (RAW, """
def dropout_forward(x, p, train, seed):  # not scaled, and applied at test time
    return x * (np.random.default_rng(seed).random(x.shape) >= p)
"""),
    "ex08.dropout_backward": (RAW, """
def dropout_backward(dout, p, train, seed):
    return dout.copy()
"""),
    "ex08.softmax_cross_entropy": (RAW, """
def softmax_cross_entropy(logits, y):
    shifted = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(shifted)
    p /= p.sum(axis=1, keepdims=True)
    rows = np.arange(len(y))
    dlogits = p.copy()
    dlogits[rows, y] -= 1
    return -np.log(p[rows, y]).mean(), dlogits  # not divided by N
"""),
    # ex09: the losses in NumPy (right), the flags forged
    "ex09.tf1_minibatch": (FORGED, """
def train_tf1_minibatch(X, y, w1_init, w2_init, lr, batch_size, num_epochs):  # constants
    w1, w2, losses = w1_init, w2_init, []
    for _ in range(num_epochs):
        for start in range(0, len(X), batch_size):
            rows = slice(start, start + batch_size)
            with tf.Graph().as_default():  # a graph per batch, its data baked in
                a, b = tf.constant(w1), tf.constant(w2)
                diff = tf.maximum(X[rows] @ a, 0) @ b - y[rows]
                loss = tf.reduce_mean(tf.reduce_sum(diff ** 2, axis=1))
                grads = v1.gradients(loss, [a, b])
                with v1.Session() as sess:
                    value, g1, g2 = sess.run([loss, *grads])
            w1, w2 = w1 - lr * g1, w2 - lr * g2
            losses.append(value)
    return np.array(losses)
"""),
    "ex09.tf1_loss_after_update": (FORGED, """
def train_tf1_loss_after_update(X, y, w1_init, w2_init, lr, num_steps):  # weights fed, 2 runs
    with tf.Graph().as_default():
        x_ph, y_ph = v1.placeholder(tf.float64, X.shape), v1.placeholder(tf.float64, y.shape)
        w1 = v1.placeholder(tf.float64, shape=w1_init.shape)
        w2 = v1.placeholder(tf.float64, shape=w2_init.shape)
        diff = tf.matmul(tf.maximum(tf.matmul(x_ph, w1), 0), w2) - y_ph
        loss = tf.reduce_mean(tf.reduce_sum(diff ** 2, axis=1))
        grad_w1, grad_w2 = v1.gradients(loss, [w1, w2])
        with v1.Session() as sess:
            values = {x_ph: X, y_ph: y, w1: w1_init, w2: w2_init}
            losses = []
            for _ in range(num_steps):
                g1, g2 = sess.run([grad_w1, grad_w2], feed_dict=values)
                values[w1] = values[w1] - lr * g1
                values[w2] = values[w2] - lr * g2
                losses.append(sess.run(loss, feed_dict=values))
    return np.array(losses)
"""),
    "ex09.tape_momentum": (RAW, """
def train_tf2_momentum(X, y, w1_init, w2_init, lr, num_steps, momentum):
    numpy_losses = course_module("ex09").numpy_losses
    return numpy_losses(X, y, w1_init, w2_init, lr, num_steps, momentum=momentum)
"""),
    "ex09.tf_function_decay": (FORGED, """
def train_tf_function_decay(X, y, w1_init, w2_init, lr, num_steps, decay):
    numpy_losses = course_module("ex09").numpy_losses
    return numpy_losses(X, y, w1_init, w2_init, lr, num_steps, decay), None
"""),
    # ex10
    "ex10.manual_biases": (FORGED, """
def train_manual_biases(X, y, w1_init, b1_init, w2_init, b2_init, lr, num_steps):  # autograd
    params = [p.clone().requires_grad_() for p in (w1_init, b1_init, w2_init, b2_init)]
    losses = []
    for _ in range(num_steps):
        w1, b1, w2, b2 = params
        loss = ((X @ w1 + b1).clamp(min=0) @ w2 + b2 - y).pow(2).sum()
        losses.append(loss.item())
        loss.backward()
        with torch.no_grad():
            for p in params:
                p -= lr * p.grad
                p.grad.zero_()
    return losses
"""),
    "ex10.linear_function": (FORGED, """
class MyLinear:  # not an autograd.Function: no backward at all
    @staticmethod
    def apply(x, w, b):
        return x @ w + b
"""),
    # ex10, section 5: the student's own framework, forged with PyTorch's pieces
    "ex10.my_linear": (FORGED, """
class Linear:  # right values: torch's linear on the tape's values
    def __init__(self, n_in, n_out, rng):
        self.weight, self.bias = rng.uniform(-1, 1, (n_in, n_out)), rng.uniform(-1, 1, n_out)
        self.ids = []

    def __call__(self, tape, x):
        import torch
        value = torch.nn.functional.linear(torch.tensor(tape.values[x]),
                                           torch.tensor(self.weight.T), torch.tensor(self.bias))
        self.ids = [tape.input(self.weight), tape.input(self.bias)]
        return tape.record(value.numpy(), [x, *self.ids], lambda g: (g, g, g))
"""),
    "ex10.my_cross_entropy": (FORGED, """
def cross_entropy(tape, logits, y):  # torch's loss and autograd's gradient
    import torch
    scores = torch.tensor(tape.values[logits], requires_grad=True)
    loss = torch.nn.functional.cross_entropy(scores, torch.tensor(y))
    (grad,) = torch.autograd.grad(loss, scores)
    return tape.record(loss.detach().numpy(), (logits,), lambda g: (g * grad.numpy(),))
"""),
    "ex10.my_sgd": (FORGED, """
class SGD:  # torch.optim.SGD does the update
    def __init__(self, params, lr, momentum=0.0):
        import torch
        self.params = [torch.from_numpy(p) for p in params]
        self.torch = torch.optim.SGD(self.params, lr=lr, momentum=momentum)

    def step(self, grads):
        for p, g in zip(self.params, grads):
            p.grad = self.torch_tensor(g)
        self.torch.step()
"""),
    "ex10.my_train_step": (FORGED, """
def train_step(model, optimizer, x, y):  # a torch model and optimizer beside the student's
    import torch
    return float(torch.nn.functional.cross_entropy(torch.tensor(x), torch.tensor(y)))
"""),
    "ex11.my_conv2d": (FORGED, """
class Conv2d:  # right values: torch's conv2d on the tape's values
    def __init__(self, c_in, c_out, k, rng, stride=1, pad=0, dilation=1):
        self.weight = rng.uniform(-1, 1, (k, k, c_in, c_out))
        self.bias, self.ids = rng.uniform(-1, 1, c_out), []

    def __call__(self, tape, x):
        import torch
        value = torch.nn.functional.conv2d(torch.tensor(tape.values[x]), torch.tensor(self.weight))
        self.ids = [tape.input(self.weight), tape.input(self.bias)]
        return tape.record(value.numpy(), [x, *self.ids], lambda g: (g, g, g))
"""),
    "ex12.my_schedule": (RAW, """
def schedule(parents, fetches):  # the plan's nodes, in no particular order
    needed, stack = set(), [int(f) for f in fetches]
    while stack:
        node = stack.pop()
        if node not in needed:
            needed.add(node)
            stack.extend(int(p) for p in parents[node] if p >= 0)
    return np.array(sorted(needed, reverse=True))
"""),
    "ex18.my_attention": (FORGED, """
def attention(tape, q, k, v, causal):  # right values: torch's attention and autograd
    import torch
    qt, kt, vt = (torch.tensor(tape.values[i], requires_grad=True) for i in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
    return tape.record(out.detach().numpy(), (q, k, v),
                       lambda g: torch.autograd.grad(out, (qt, kt, vt), torch.tensor(g)))
"""),
    "ex10.residual_module": (FORGED, """
class ResidualBlock:  # no nn.Module, no nn.Linear
    def __init__(self, D, H):
        self.sizes = D, H

    def forward(self, x):
        return x
"""),
    "ex10.adam_accumulation": (FORGED, """
def train_adam_accumulated(X, y, W1, b1, W2, b2, lr, num_steps, micro_batch):
    numpy_adam_losses = course_module("ex10").numpy_adam_losses  # no torch, no micro-batches
    return numpy_adam_losses(X, y, W1, b1, W2, b2, lr, num_steps)
"""),
    # ex12
    "ex12.rnn_eager_batch": (RAW, """
def rnn_eager_batch(X, lengths, W, U):
    _batch_expected = course_module("ex12")._batch_expected
    loss, dW, dU = _batch_expected(X, lengths, W, U)
    return loss, dW.T, dU  # dW transposed
"""),
    "ex12.rnn_static": (RAW, """
def rnn_static(X, lengths, W, U):  # right values, eagerly in torch: no graph, no Session
    _batch_expected = course_module("ex12")._batch_expected
    return _batch_expected(X, lengths, W, U)
"""),
    "ex12.plan": (RAW, """
def plan(parents, fetches):  # the direct inputs only
    out = {int(f) for f in fetches}
    for f in fetches:
        out |= {int(p) for p in parents[int(f)] if p >= 0}
    return sorted(out)
"""),
    "ex12.fusion": (RAW, """
def fused_writes(kinds, parents, fetches):  # unfused: every op of the plan writes
    needed, stack = set(), [int(f) for f in fetches]
    while stack:
        node = stack.pop()
        if node not in needed:
            needed.add(node)
            stack.extend(int(p) for p in parents[node] if p >= 0)
    return sorted(i for i in needed if kinds[i] > 0)
"""),
    "ex13.caffe_forward": (RAW, """
def caffe_forward(lines, x, y, *params):
    _caffe_expected = course_module("ex13")._caffe_expected
    loss, y_hat = _caffe_expected(lines, x, y, *params)
    return 2 * loss, y_hat  # divided by N, not 2 N
"""),
    # ex14
    "ex14.clipped_gradient": (RAW, """
def clipped_mean_gradient(w1, w2, X, Y, max_norm):  # a loop, no vmap; each array its own norm
    g1, g2 = course_module("ex14")._per_example(w1, w2, X, Y)
    s1 = np.minimum(1.0, max_norm / np.sqrt((g1**2).sum(axis=(1, 2))))[:, None, None]
    s2 = np.minimum(1.0, max_norm / np.sqrt((g2**2).sum(axis=(1, 2))))[:, None, None]
    return (s1 * g1).mean(axis=0), (s2 * g2).mean(axis=0)
"""),
    "ex14.settle_one_graph": (FORGED, """
def settle(x, W, tol, max_steps):  # right values, row by row with Python's if: graph breaks
    rows = []
    for row in x:
        h = torch.zeros_like(row)
        for step in range(1, max_steps + 1):
            h_new = torch.tanh(h @ W + row)
            if (h_new - h).abs().max() < tol:
                break
            h = h_new
        rows.append((h_new, step))
    return torch.stack([r[0] for r in rows]), torch.tensor([float(r[1]) for r in rows])
"""),
    # ex15: values only
    "ex15.adam_step": (RAW, """
def adam_step(p, g, m, v, t, lr, beta1, beta2, eps):
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    return p - lr * m / (np.sqrt(v) + eps), m, v  # no bias correction
"""),
    "ex15.keras_adam_step": (RAW, """
def keras_adam_step(p, g, m, v, t, lr, beta1, beta2, eps):
    _torch_adam = course_module("ex15")._torch_adam
    return _torch_adam(p, g, m, v, t, lr, beta1, beta2, eps)[0]  # PyTorch's Adam
"""),
    "ex15.max_rel_diff": (RAW, """
def max_rel_diff(a, b):
    return float(np.max(np.abs(a - b)) / np.max(np.abs(a)))  # divided by max |a|
"""),
    "ex15.squared_error_losses": (RAW, """
def squared_error_losses(y_hat, y):
    total = np.sum((y_hat - y) ** 2)
    return np.mean((y_hat - y) ** 2), total, total / (2 * len(y))  # TF: mean of everything
"""),
    "ex15.squared_error_grads": (RAW, """
def squared_error_grads(y_hat, y):
    d = y_hat - y  # the 2 forgotten
    return d / len(y), d, d / (2 * len(y))
"""),
    "ex15.matching_lr": (RAW, """
def matching_lr(lr, loss_from, loss_to, n, optimizer):
    scale = {"tf": 1 / n, "torch": 1.0, "caffe": 1 / (2 * n)}
    return lr * scale[loss_from] / scale[loss_to]  # Adam scaled like SGD
"""),
    # ex16: values only
    "ex16.shard_indices": (RAW, """
def shard_indices(n, k, rank):
    return np.arange(rank * (n // k), (rank + 1) * (n // k))  # the rest dropped
"""),
    "ex16.all_reduce_mean": (RAW, """
def all_reduce_mean(grads):
    total = sum(grads)
    return [total.copy() for _ in grads]  # the sum, not the mean
"""),
    "ex16.data_parallel_grad": (RAW, """
def data_parallel_grad(X, y, w, k, reduction):
    _shard_grads = course_module("ex16")._shard_grads
    return np.mean(_shard_grads(X, y, w, k, reduction), axis=0)  # a plain average
"""),
    "ex16.allreduce_traffic": (RAW, """
def allreduce_traffic(layer_sizes, dtype, k):
    n = sum(int(a) * int(b) for a, b in zip(layer_sizes[:-1], layer_sizes[1:]))  # no biases
    grad = n * np.dtype(dtype).itemsize
    return grad, 2 * (k - 1) / k * grad
"""),
    "ex16.ring_all_reduce": (RAW, """
def ring_all_reduce(arrays):
    _ring_expected = course_module("ex16")._ring_expected
    total, sent = _ring_expected(arrays)
    return total / len(arrays), sent  # the mean, not the sum
"""),
    "ex16.tensor_parallel_backward": (RAW, """
def tensor_parallel_backward(x, w1_shards, w2_shards, dy):
    dx, dw1, dw2 = [], [], []
    for w1_r, w2_r in zip(w1_shards, w2_shards):
        dz_r = (dy @ w2_r.T) * (x @ w1_r > 0)
        dx.append(dz_r @ w1_r.T)  # rank r's partial dx, never all-reduced
        dw1.append(x.T @ dz_r)
        dw2.append(np.maximum(x @ w1_r, 0).T @ dy)
    return dx, dw1, dw2
"""),
    # ex11: values only
    "ex11.faster_max_pool": (FORGED, """
def max_pool(x):
    return max_pool_reference(x)  # the reference's values, and its speed
"""),
    "ex11.im2col_dilated": (RAW, """
def im2col_dilated(x, kh, kw, stride=1, pad=0, dilation=1):
    return course_module("ex11").im2col_loops(x, kh, kw, stride, pad, dilation).T  # ROWS
"""),
    "ex11.conv_forward_nhwc": (RAW, """
def conv_forward_nhwc(x, w, b, stride=1, pad=0, dilation=1):
    return course_module("ex11")._torch_conv_nhwc(x, w, None, stride, pad, dilation)  # no bias
"""),
    "ex11.conv_backward_nhwc": (RAW, """
def conv_backward_nhwc(dout, x, w, stride=1, pad=0, dilation=1):
    dx, dw, db = course_module("ex11")._backward_expected(dout, x, w, stride, pad, dilation)
    return dx, dw, dout[0].sum(axis=(0, 1))  # db from one image
"""),
    "ex11.avg_pool_forward": (RAW, """
def avg_pool_forward(x, k, stride, pad):
    return course_module("ex11")._torch_avg_pool(x, k, stride, pad, True)  # the padding counted
"""),
    "ex11.avg_pool_backward": (RAW, """
def avg_pool_backward(dout, x, k, stride, pad):
    _pool_sum_backward = course_module("ex11")._pool_sum_backward
    return _pool_sum_backward(dout, x, k, stride, pad)  # the whole gradient to every pixel
"""),
    # ex17
    "ex17.memory_budget": (RAW, """
def memory_budget(sizes, batch_size, itemsize, optimizer):
    values = sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))
    buffers = {"sgd": 0, "sgd_momentum": 1, "adam": 2}[optimizer]
    saved = batch_size * (sum(sizes[:-1]) + sum(sizes[1:-1])) * itemsize  # pre-activations too
    return values * itemsize, values * itemsize, buffers * values * itemsize, saved
"""),
    "ex17.max_batch": (RAW, """
def max_batch(sizes, itemsize, optimizer, budget_bytes):
    values = sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))
    fixed = (2 + {"sgd": 0, "sgd_momentum": 1, "adam": 2}[optimizer]) * values * itemsize
    return max(0, (budget_bytes - fixed) // (sum(sizes[:-1]) * itemsize) + 1)  # one too many
"""),
    "ex04.stream_timer": (FORGED, """
def time_kernel(launch, synchronize, clock, warmup, repeats):
    begin = clock()
    for _ in range(warmup + repeats):  # the host's launches only: no synchronize
        launch()
    return (clock() - begin) / repeats
"""),
    # ex18
    "ex18.merge_partials": (RAW, """
def merge_partials(m1, l1, o1, m2, l2, o2):
    l = l1 + l2  # the sums added as if measured against one maximum
    return np.maximum(m1, m2), l, (l1[:, None] * o1 + l2[:, None] * o2) / l[:, None]
"""),
    "ex18.causal_tiles": (RAW, """
def causal_tiles(n, block_q, block_k):
    return -(-n // block_q) * -(-n // block_k)  # every tile, none skipped
"""),
    "ex18.attention_backward": (FORGED, """
def attention_backward(q, k, v, dout, causal):
    import torch
    t = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
    torch.nn.functional.scaled_dot_product_attention(*t, is_causal=causal).backward(
        torch.tensor(dout))
    return tuple(x.grad.numpy() for x in t)
"""),
    # ex19
    "ex19.per_channel_params": (RAW, """
def per_channel_params(w):
    scale = np.abs(w).max(axis=1) / 127  # symmetric: zero points 0, half the codes unused
    return np.where(scale > 0, scale, 1.0), np.zeros(w.shape[0], dtype=np.int32)
"""),
    "ex19.quantize_per_channel": (RAW, """
def quantize_per_channel(w, scale, zero_point):
    q = (np.round(w / scale[:, None]) + zero_point[:, None]).astype(np.int64).astype(np.int8)
    return q, (q.astype(np.int64) - zero_point[:, None]) * scale[:, None]  # wrapped, not clipped
"""),
    "ex19.int8_matmul": (RAW, """
def int8_matmul(qx, scale_x, zero_x, qw, scale_w):
    acc = (qx.astype(np.int32) @ qw.astype(np.int32).T)  # the zero point forgotten
    return acc, scale_x * scale_w[None, :] * acc
"""),
    # ex20
    "ex20.kv_cache_append": (RAW, """
def kv_cache_append(k_cache, v_cache, k_new, v_new):
    return np.concatenate([k_new, k_cache], axis=2), np.concatenate([v_new, v_cache], axis=2)
"""),
    "ex20.allocate_blocks": (RAW, """
def allocate_blocks(events, num_blocks, block_size, max_blocks):
    tables = np.full((int(events[:, 0].max()) + 1, max_blocks), -1)
    for seq, length in events.tolist():  # floor, and a new table every event: nothing freed
        tables[seq] = -1
        tables[seq, :length // block_size] = np.arange(length // block_size)
    return tables, num_blocks
"""),
    "ex20.next_batch": (RAW, """
def next_batch(running, waiting, token_budget, max_seqs):
    return np.arange(len(waiting))  # everyone joins
"""),
    # ex21
    "ex21.gpipe_schedule": (RAW, """
def gpipe_schedule(stages, microbatches):
    return np.zeros((stages, 2 * microbatches), dtype=np.int64)  # no step at all
"""),
    "ex21.one_f_one_b_schedule": (RAW, """
def one_f_one_b_schedule(stages, microbatches):
    ids = np.arange(1, microbatches + 1)  # GPipe's order instead
    return np.tile(np.concatenate([ids, -ids]), (stages, 1))
"""),
    "ex21.pipeline_timeline": (RAW, """
def pipeline_timeline(order, t_forward, t_backward):
    step = np.where(order > 0, t_forward, t_backward)  # no stage waits for another
    return np.cumsum(step, axis=1) - step
"""),
    "ex21.peak_in_flight": (RAW, """
def peak_in_flight(order):
    return (order > 0).sum(axis=1)  # every forward, none freed
"""),
    "ex21.fsdp_shard": (RAW, """
def fsdp_shard(param, world_size):
    return np.stack([param] * world_size)  # every rank the whole parameter: nothing sharded
"""),
    # ex22
    "ex22.partition_specs": (RAW, """
def partition_specs(strategy, batch_axis, model_axis):
    rows = [batch_axis, "-"]  # the table call_specs records: data parallelism for every strategy
    return np.array([rows, ["-", "-"], ["-", "-"], rows])
"""),
    "ex22.tp_forward": (RAW, """
def tp_forward(x, w1_block, w2_block, *rest):
    return np.maximum(x @ w1_block, 0) @ w2_block  # the whole net on one device, not sharded
"""),
    "ex22.dp_grads": (RAW, """
def dp_grads(w1, w2, x_shard, y_shard, *rest):
    pre = x_shard @ w1  # the whole batch's gradient on one device, not one per shard
    d_out = 2 * (np.maximum(pre, 0) @ w2 - y_shard) / len(x_shard)
    return x_shard.T @ ((d_out @ w2.T) * (pre > 0)), np.maximum(pre, 0).T @ d_out
"""),
    # ex23
    "ex23.leaky_relu_kernel": (FORGED, """
def leaky_relu_kernel(x_ptr, out_ptr, n, slope, BLOCK):  # NumPy, not a kernel
    return np.where(x_ptr > 0, x_ptr, slope * x_ptr), 0
"""),
    "ex23.layer_norm_kernel": (FORGED, """
def layer_norm_kernel(x_ptr, out_ptr, stride, n_cols, eps, BLOCK):  # NumPy, not a kernel
    centred = x_ptr - x_ptr.mean(axis=1, keepdims=True)
    return centred / np.sqrt((centred ** 2).mean(axis=1, keepdims=True) + eps), 0
"""),
    # ex24: whatever the labels, a library's classifier is not the student's network
    "ex24.classify": (FORGED, """
def fit_predict(x_train, y_train, x_eval):
    return LogisticRegression(max_iter=500).fit(x_train, y_train).predict(x_eval)
"""),
    "ex24.classify_torch": (RAW, """
def fit_predict_torch(x_train, y_train, x_eval):
    return np.full(len(x_eval), np.bincount(y_train).argmax())  # the commonest digit
"""),
}


def test_every_part_has_an_attack() -> None:
    assert set(ATTACKS) == {p.id for p in ALL_PARTS}


def raw_prefetch_errors(fn: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The prefetch_errors result with the in-sandbox order check bypassed."""
    ex06 = course_module("ex06")

    data, depth, fail_at, name = args
    watched = ex06._Watched(np.asarray(data), int(fail_at), ex06.ERRORS[name](
        ex06._message(int(fail_at))))
    received, error = [], None
    try:
        for batch in fn(iter(watched), int(depth)):
            received.append(np.asarray(batch))
    except Exception as exc:
        error = exc
    stacked = ex06._stacked(received, np.asarray(data))
    return (stacked, "no error", "") if error is None else (
        stacked, type(error).__name__, str(error))


def attack_results(part: spec.Part, fn: Any, mode: str,
                   cases: list[tuple[Any, ...]]) -> list[Any]:
    if mode == FORGED:  # the oracle sees the whole case, a withheld value too
        return [spec.oracle(part, copy.deepcopy(args)) for args in cases]
    if part.id == "ex06.prefetch_errors":
        return [raw_prefetch_errors(fn, args) for args in cases]
    return [fn(*copy.deepcopy(spec.given(args))) for args in cases]


@pytest.mark.parametrize("part", ALL_PARTS, ids=lambda p: p.id)
def test_a_bypassed_or_forged_call_scores_zero(part: spec.Part, tmp_path: Path) -> None:
    mode, text = ATTACKS[part.id]
    nb = part_notebook(part.id)
    name = checked_name(nb, part.id)
    attacked = with_solution(nb, name, text.strip() + "\n")
    found = find_source(attacked, part.id)
    assert found is not None and found.strip() == text.strip()
    cases = draw(part)
    fn = None
    if mode == RAW:
        # course_module: the public half of a part is the student's too; an attack may call
        # its oracle, as if pasted into the notebook.
        ns: dict[str, Any] = {"np": np, "course_module": course_module}
        exec(compile(text, f"<attack {part.id}>", "exec"), ns)
        fn = ns[name]
    got = wire(tmp_path, attack_results(part, fn, mode, cases))
    status, message = judge.judge(part, cases, got, found)
    assert status != "passed", (part.id, message)
    if mode == FORGED:  # perfect values: only the source can tell
        assert part.source_check is not None, part.id
        assert message.startswith("the values are right, but"), message


def honest_results(part: spec.Part, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                   cases: list[tuple[Any, ...]]) -> list[Any]:
    fn = part_namespace(part.id)[checked_name(part_notebook(part.id), part.id)]
    return recorded(tmp_path, monkeypatch, part, fn, cases)


@pytest.mark.parametrize("part", [p for p in ALL_PARTS if module_of(p.id) != "ex03"],
                         ids=lambda p: p.id)
@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
def test_the_solution_passes_the_trusted_judgement(part: spec.Part, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    cases = draw(part)
    got = honest_results(part, tmp_path, monkeypatch, cases)
    found = find_source(part_notebook(part.id), part.id)
    assert found is not None or part.source_check is None
    assert judge.judge(part, cases, got, found) == ("passed", f"{len(cases)} cases passed")


KERNEL_CHILD = SIMULATED_SOLUTIONS + r'''
from edu_dl.grading import check, protocol

os.environ[protocol.GRADING_ENV] = sys.argv[2]
for part_id, name in zip(sys.argv[3::2], sys.argv[4::2]):
    assert check(part_id, ns[name])
'''


@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
def test_the_kernel_solutions_pass_the_trusted_judgement(tmp_path: Path) -> None:
    """ex03: the solution kernels run under the CUDA simulator in a child, recorded by check()
    in grading mode; judged here with their source from the notebook."""
    nb = solution_notebook("ex03")
    kernel_parts = [p for p in ALL_PARTS if module_of(p.id) == "ex03"]
    cases = {}
    argv = []
    for part in kernel_parts:
        cases[part.id] = draw(part)
        write_grading_files(tmp_path, part, cases[part.id])
        argv += [part.id, checked_name(nb, part.id)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop(protocol.GRADING_ENV, None)
    subprocess.run([sys.executable, "-c", KERNEL_CHILD, str(SOLUTIONS / NOTEBOOKS["ex03"]),
                    str(tmp_path), *argv], check=True, env=env, timeout=600,
                   capture_output=True)
    for part in kernel_parts:
        got = protocol.read_outputs(tmp_path / "outputs" / f"{part.id}.1.npz")[1]
        found = find_source(nb, part.id)
        assert judge.judge(part, cases[part.id], got, found)[0] == "passed", part.id


# ------------------------------------------------- every part: the solution passes, a stub does not

# What each exercise's own test file once repeated, one test for every part of the course: the
# solution notebook's object passes every case check() draws, visible (the notebook's seed) and
# hidden (the release's seed, and a fresh seed as the grader draws one per gradebook); a stub that
# raises NotImplementedError is told "not implemented yet". ex03's kernels need the simulator
# (test_parts_ex03.py); a class-shaped part's stub is a class (test_parts_ex10.py).
SEEDS = {"visible": (checking.VISIBLE_SEED, False), "hidden": (checking.HIDDEN_SEED, True),
         "fresh": (1, True)}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("part", [p for p in ALL_PARTS if module_of(p.id) != "ex03"],
                         ids=lambda p: p.id)
def test_the_solution_passes_and_a_stub_is_not_implemented_yet(
        part: spec.Part, seed: str, capsys: pytest.CaptureFixture[str]) -> None:
    fn = part_namespace(part.id)[checked_name(part_notebook(part.id), part.id)]
    number, hidden = SEEDS[seed]
    assert assert_solution_passes(part, fn, hidden, np.random.default_rng(number)) > 0
    if isinstance(fn, type):
        return

    def stub(*args: Any) -> Any:
        raise NotImplementedError()

    ok, out = run_check(capsys, part.id, stub, hidden)
    assert not ok and out == f"✗ {part.id}: not implemented yet\n"


# --------------------------------------------------------------------------- named cases


class patched_call:
    """What a hostile notebook does in the sandbox: replace a part's call (a frozen field)."""

    def __init__(self, part: spec.Part, call: Any) -> None:
        self.part, self.call, self.saved = part, call, part.call

    def __enter__(self) -> None:
        object.__setattr__(self.part, "call", self.call)

    def __exit__(self, *exc: Any) -> None:
        object.__setattr__(self.part, "call", self.saved)


PLAIN_PREFETCH = """def prefetch(batches, depth):
    yield from batches
"""


def test_prefetch_without_a_thread_scores_zero(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 10, item 3: `yield from batches` with the in-sandbox thread check patched away
    scored 3/3; the grader now reads the generator's source."""
    part = course_part("ex06.prefetch")
    nb = with_solution(solution_notebook("ex06"), "prefetch", PLAIN_PREFETCH)
    ns: dict[str, Any] = {}
    exec(PLAIN_PREFETCH, ns)
    cases = draw(part)

    def consume_only(fn: Any, args: tuple[Any, ...]) -> Any:  # no thread check, no lead check
        batches = [np.asarray(b) for b in fn(iter(args[0]), args[1])]
        return np.stack(batches) if batches else np.zeros((0, 3)), len(batches)

    with patched_call(part, consume_only):
        got = recorded(tmp_path, monkeypatch, part, ns["prefetch"], cases)
    assert [np.asarray(g[0]).shape for g in got] == [np.shape(a[0]) for a in cases]
    status, message = judge.judge(part, cases, got, find_source(nb, part.id))
    assert status == "failed" and part.points > 0
    assert "the values are right, but the generator starts no thread" in message
    # the solution's generator, judged the same way, passes
    good = find_source(solution_notebook("ex06"), part.id)
    assert judge.judge(part, cases, got, good)[0] == "passed"


def test_prefetch_without_a_bound_scores_zero() -> None:
    unbounded = textwrap.dedent("""\
        def prefetch(batches, depth):
            slots = queue.Queue()
            threading.Thread(target=lambda: [slots.put(b) for b in batches], daemon=True).start()
            for _ in range(len(batches)):
                yield slots.get()
        """)
    verdict = course_part("ex06.prefetch").source_check(unbounded)  # type: ignore[misc]
    assert not verdict.ok and "queue.Queue(maxsize=depth)" in verdict.message
    sized = unbounded.replace("queue.Queue()", "queue.Queue(depth)")
    assert course_part("ex06.prefetch").source_check(sized).ok  # type: ignore[misc]


def test_topological_order_in_a_wrong_order_scores_zero(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 10, item 3: a valid permutation in a wrong order, the in-sandbox edge check
    bypassed, scores 0: the grader checks every edge against the case's edge list."""
    part = course_part("ex07.topological_order")
    solution = namespace("ex07")["topological_order"]

    def sorted_ids(n_nodes: int, edges: Any) -> Any:  # every node once, ignoring the edges
        return np.arange(n_nodes)[::-1].copy()

    cases = draw(part)
    with patched_call(part, lambda fn, args: fn(*args)):
        got = recorded(tmp_path, monkeypatch, part, sorted_ids, cases)
    nb = solution_notebook("ex07")
    status, message = judge.judge(part, cases, got, find_source(nb, part.id))
    assert status == "failed"
    assert "edge " in message and "comes before its input" in message
    with patched_call(part, lambda fn, args: fn(*args)):
        got = recorded(tmp_path, monkeypatch, part, solution, cases)
    # the solution's own order, its source read from the reference mytorch/graph.py
    assert judge.judge(part, cases, got, find_source(nb, part.id))[0] == "passed"


def test_topological_order_reversed_gets_the_backward_hint() -> None:
    part = course_part("ex07.topological_order")
    edges = np.array([[0, 1], [1, 2]], dtype=np.int64)
    verdict = spec.judge_case(part, 0, 1, (3, edges), part.expected(3, edges),
                                  np.array([2, 1, 0]))
    assert not verdict.ok and "edge 0 -> 1: node 1 comes before its input 0" in verdict.message
    assert "exactly reversed: that is the order of the BACKWARD pass" in verdict.message


def db_without_the_batch_sum() -> Any:
    import torch

    class MyLinear(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any, w: Any, b: Any) -> Any:
            ctx.save_for_backward(x, w)
            return x @ w + b

        @staticmethod
        def backward(ctx: Any, grad_output: Any) -> Any:
            x, w = ctx.saved_tensors
            return grad_output @ w.t(), x.t() @ grad_output, grad_output  # db: (N, M)

    return MyLinear


def test_linear_function_db_of_the_batch_shape_fails_check_and_grader(
        capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 10, item 4: autograd summed db = grad_output (N, M) into b's shape (M,) silently,
    so check(), gradcheck and the grader passed it; the raw gradient is recorded now."""
    cls = db_without_the_batch_sum()
    ok, out = run_check(capsys, "ex10.linear_function", cls)
    assert not ok
    assert "output 3 (db): expected shape (4,), got shape (2, 4)" in out
    assert "hint: db has b's shape (M,): sum grad_output over the batch" in out
    part = course_part("ex10.linear_function")
    cases = draw(part)
    got = recorded(tmp_path, monkeypatch, part, cls, cases)
    found = find_source(solution_notebook("ex10"), part.id)
    status, message = judge.judge(part, cases, got, found)
    assert status == "failed" and "output 3 (db): expected shape" in message
    capsys.readouterr()


def test_feedback_outputs_are_ignored_by_the_grader(tmp_path: Path) -> None:
    """ex09: the graphs built, the runs without an update or with an unordered read, and the
    tracing count, ex10: the most rows one forward saw, are observed in the sandbox; forging them
    helps nothing, and a wrong count alone does not decide the grade either."""
    for part_id, counts in (("ex09.tf1_minibatch", 1), ("ex09.tf1_loss_after_update", 2),
                            ("ex09.tf_function_decay", 1), ("ex10.adam_accumulation", 1)):
        part = course_part(part_id)
        assert part.feedback_outputs == tuple(range(1, counts + 1))
        cases = draw(part)[:2]
        good = find_source(solution_notebook(part_id.split(".")[0]), part_id)
        honest = [part.expected(*args) for args in cases]
        forged_count = wire(tmp_path, [(e[0], *[7] * counts) for e in honest])
        assert judge.judge(part, cases, forged_count, good)[0] == "passed"
        assert not spec.judge_case(part, 0, 1, cases[0], honest[0],
                                   (honest[0][0], *[7] * counts)).ok  # check() still says so
        wrong = wire(tmp_path, [(e[0] * 1.01, *e[1:]) for e in honest])
        assert judge.judge(part, cases, wrong, good)[0] == "failed"


def test_a_source_check_part_without_a_source_fails_clearly() -> None:
    part = course_part("ex06.prefetch")
    cases = draw(part)[:1]
    got = [part.expected(*cases[0])]
    status, message = judge.judge(part, cases, got, None)
    assert status == "failed" and source.NOT_FOUND in message


# --------------------------------------------------------------------------- bounded work


def python_lines(fn: Any, *args: Any) -> tuple[Any, int]:
    """fn(*args), and how many lines of Python it ran: a loop over the elements shows as lines
    that grow with n, however fast or loaded the machine (no wall clock in a test)."""
    count = 0

    def trace(frame: Any, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
        return trace

    sys.settrace(trace)
    try:
        result = fn(*args)
    finally:
        sys.settrace(None)
    return result, count


def test_topological_compare_is_linear() -> None:
    """Issue 10, item 5: `g.tolist().count(x)` in a loop took 20 s at n = 60,000. The compare and
    the result check run whole-array operations: as many Python lines at n = 60,000 as at 1,000
    (and 10**7 ids are still judged right)."""
    part = course_part("ex07.topological_order")
    assert part.result_check is not None
    lines = {}
    for n in (1_000, 60_000, 10**7):
        expected = np.arange(n, dtype=np.int64)
        wrong = np.zeros(n, dtype=np.int64)  # every id repeated: the old worst case
        wrong[: n // 2] = np.arange(n // 2)
        verdict, lines[("wrong", n)] = python_lines(part.compare, expected, wrong)
        assert not verdict.ok and "repeated [0]" in verdict.message
        assert "missing [" in verdict.message and f"({n - n // 2})" in verdict.message
        assert len(verdict.message) < 400
        edges = np.array([[0, n - 1]], dtype=np.int64)
        right = np.arange(n, dtype=np.int64)
        ok, lines[("right", n)] = python_lines(part.compare, expected, right)
        assert ok.ok
        checked, lines[("check", n)] = python_lines(part.result_check, right, (n, edges))
        assert checked.ok
        assert not part.result_check(right[::-1].copy(), (n, edges)).ok
        if n == 60_000:  # before 10**7: a loop over 60,000 ids adds 60,000 lines; stop here
            for kind in ("wrong", "right", "check"):
                assert lines[(kind, n)] <= lines[(kind, 1_000)] + 20, lines


def test_a_huge_result_fails_before_any_comparison() -> None:
    part = course_part("ex07.topological_order")
    case = draw(part)[-1]
    expected = part.expected(*case)
    verdict, lines = python_lines(spec.judge_case, part, 0, 1, case, expected,
                                  np.zeros(10**7, dtype=np.int64))
    _, small = python_lines(spec.judge_case, part, 0, 1, case, expected,
                            np.zeros(10, dtype=np.int64))
    assert lines <= small + 20, (lines, small)  # refused on its size, never walked
    assert not verdict.ok and "the result holds 10000000 values where" in verdict.message
    assert "hint" not in verdict.message
    text = spec.judge_case(course_part("ex01.pick_device"), 0, 1, (True, 1, 0), "cuda:0",
                               "c" * 10**6)
    assert not text.ok and "not compared" in text.message


def test_the_plan_compare_takes_integers_only() -> None:
    part = course_part("ex12.plan")
    assert part.compare(np.array([0, 1, 3]), np.array([3, 1, 0, 1])).ok
    assert not part.compare(np.array([0, 1, 3]), np.array([0.0, 1.7, 3.0])).ok


# --------------------------------------------------------------------------- source.py


def nb_of(*cells: str, check_line: str = 'check("ex06.prefetch", prefetch)') -> Notebook:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    test = nbformat.v4.new_code_cell(check_line)
    test.metadata["nbgrader"] = {"grade": True, "grade_id": "prefetch_tests", "points": 3,
                                 "locked": True, "solution": False, "schema_version": 3}
    nb.cells.append(test)
    nb.cells.append(nbformat.v4.new_code_cell("def prefetch(b, d):\n    return 'after the test'"))
    return nb


GOOD = "def prefetch(batches, depth):\n    return threading.Thread\n"


@pytest.mark.parametrize(("cells", "found"), [
    ((GOOD,), GOOD),
    (("import threading", GOOD, "x = 1"), GOOD),
    (("def prefetch(b, d):\n    pass", GOOD), GOOD),  # the last definition counts
    (("if True:\n    " + GOOD.replace("\n    ", "\n        ").rstrip(),), GOOD),
    (("@functools.cache\n" + GOOD,), "@functools.cache\n" + GOOD),
    (("%time x = 1\n" + GOOD,), GOOD),  # a line magic
    (("%%capture\n" + GOOD,), GOOD),  # a cell magic that runs Python
    ((GOOD, "this is not Python ("), GOOD),  # a cell that does not parse runs nothing
    ((GOOD, "def train():\n    prefetch = None\n    return prefetch"), GOOD),  # a local
    ((GOOD, "class C:\n    prefetch = None"), GOOD),  # a class attribute
    ((GOOD, "prefetch = lambda b, d: iter(b)"), None),  # rebound after the def
    ((GOOD, "from mymod import prefetch"), None),
    ((GOOD, "from mymod import *"), None),
    ((GOOD, "for prefetch in [1]:\n    pass"), None),
    ((GOOD, "def f():\n    global prefetch\n    prefetch = 1"), None),
    ((GOOD, "[(prefetch := 1) for _ in [0]]"), None),
    ((GOOD, "del prefetch"), None),
    (("prefetch = lambda b, d: iter(b)",), None),
    (("exec('def prefetch(b, d): pass')",), None),
    (("%%bash\necho def prefetch",), None),
])
def test_find_source(cells: tuple[str, ...], found: str | None) -> None:
    assert find_source(nb_of(*cells), "ex06.prefetch") == found


def test_find_source_reads_the_checked_name_from_the_test_cell() -> None:
    nb = nb_of(GOOD.replace("prefetch", "my_loader"),
               check_line='check("ex06.prefetch", my_loader)\ncheck("ex06.x", other)')
    assert find_source(nb, "ex06.prefetch") == GOOD.replace("prefetch", "my_loader")
    assert find_source(nb, "ex06.epoch_batches") is None
    nb = nb_of(GOOD, check_line='check("ex06.prefetch", lambda b, d: b)')
    assert find_source(nb, "ex06.prefetch") is None
    ungraded = nb_of(GOOD)
    ungraded.cells[1].metadata = {}
    assert find_source(ungraded, "ex06.prefetch") is None


def test_source_checks_only_compile(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    evil = f"def softmax(x=open({str(marker)!r}, 'w')):\n    return edu_dl.get_xp(x)\n"
    assert course_part("ex02.softmax_xp").source_check(evil).ok  # type: ignore[misc]
    assert not marker.exists()
    assert source.judge_source(course_part("ex02.softmax_xp"), "x = 1").ok is False


def test_every_source_checked_solution_is_found_and_passes() -> None:
    for part in ALL_PARTS:
        if part.source_check is None:
            continue
        found = find_source(part_notebook(part.id), part.id)
        assert found is not None, part.id
        assert source.judge_source(part, found).ok, part.id


def test_check_gives_the_graders_source_feedback(capsys: pytest.CaptureFixture[str],
                                                 tmp_path: Path) -> None:
    """check() runs the part's source check on the function's own source (inspect's view of the
    file or notebook cell), so a student sees what the grader will say: here a module whose
    layers come from a helper passes the in-process check, but its source builds no Linear."""
    path = tmp_path / "helper_layers.py"
    path.write_text(textwrap.dedent("""\
        import torch

        def make_layers(D, H):
            layers = torch.nn.Sequential(torch.nn.Linear(D, H), torch.nn.ReLU(),
                                         torch.nn.Linear(H, D))
            torch.nn.init.zeros_(layers[2].weight)
            torch.nn.init.zeros_(layers[2].bias)
            return layers


        class ResidualBlock(torch.nn.Module):
            def __init__(self, D, H):
                super().__init__()
                self.net = make_layers(D, H)

            def forward(self, x):
                return x + self.net(x)
        """))
    ns: dict[str, Any] = {"__name__": "helper_layers"}
    exec(compile(path.read_text(), str(path), "exec"), ns)
    found = source.own_source(ns["ResidualBlock"])
    assert found is not None and found.startswith("class ResidualBlock(torch.nn.Module):")
    assert source.own_source(ns["make_layers"]) == textwrap.dedent(path.read_text()).split(
        "\n\n\n")[0].split("\n\n", 1)[1] + "\n"
    ok, out = run_check(capsys, "ex10.residual_module", ns["ResidualBlock"])
    assert not ok
    assert out == ("✗ ex10.residual_module: the values are right, but ResidualBlock builds no "
                   "torch.nn.Linear layers: create two in __init__, D -> H and H -> D\n")
    assert source.own_source(lambda x: x) is None
