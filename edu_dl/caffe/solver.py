"""Caffe's solvers on the eager engine: SGD with momentum and Adam, Caffe's formulas exactly.

One iteration (Caffe's Solver::Step and SGDSolver::ApplyUpdate):
forward/backward ``iter_size`` times accumulating gradients, divide by ``iter_size``, clip the
global L2 norm to ``clip_gradients``, add weight decay, then per parameter

- SGD:  ``v = momentum * v + lr * lr_mult * g;  w -= v``  (lr inside the history, unlike PyTorch's
  ``v = momentum * v + g; w -= lr * v``: the same numbers while lr is fixed)
- Adam: ``m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
  w -= lr * lr_mult * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + delta)``
  with ``b1 = momentum``, ``b2 = momentum2``, ``delta`` as Caffe names them. Epsilon is added to
  sqrt(v), not to the bias-corrected sqrt(v_hat) as in PyTorch: Caffe's Adam is not PyTorch's.

Solver floats are float32 in caffe.proto, so ``base_lr: 0.01`` means 0.009999999776...
"""

from __future__ import annotations

import math
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
from tqdm import tqdm

from edu_dl import backend
from edu_dl.caffe import caffe_subset_pb2 as pb
from edu_dl.caffe.net import Net, resolve
from edu_dl.caffe.prototxt import CaffeFormatError, LayerSource, filter_net, read_net, read_solver
from edu_dl.util.progress import progress_disabled

SOLVER_TYPES = ("SGD", "Adam")
LR_POLICIES = ("fixed", "step", "exp", "inv", "multistep", "poly", "sigmoid")


@dataclass
class History:
    """What a training run leaves: the loss at every iteration, the time, the final weights."""

    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    solver_type: str = "SGD"


def solver_type(solver: pb.SolverParameter, where: str) -> str:
    """'SGD' or 'Adam' from ``type:`` (or the deprecated ``solver_type:`` enum)."""
    if solver.HasField("solver_type") and not solver.HasField("type"):
        name = pb.SolverParameter.SolverType.Name(solver.solver_type)
        kind = {"SGD": "SGD", "ADAM": "Adam"}.get(name, name)
    else:
        kind = solver.type
    if kind not in SOLVER_TYPES:
        raise CaffeFormatError(f"{where}: solver type {kind!r} is not supported (supported: "
                               f"{', '.join(SOLVER_TYPES)})")
    return kind


def learning_rate(solver: pb.SolverParameter, it: int) -> float:
    """Caffe's SGDSolver::GetLearningRate for the policies it documents."""
    base, gamma, power, policy = solver.base_lr, solver.gamma, solver.power, solver.lr_policy
    if policy == "fixed":
        return base
    if policy == "step":
        return base * gamma ** (it // solver.stepsize)
    if policy == "exp":
        return base * gamma**it
    if policy == "inv":
        return base * (1 + gamma * it) ** (-power)
    if policy == "multistep":
        return base * gamma ** sum(1 for step in solver.stepvalue if it >= step)
    if policy == "poly":
        return base * (1 - it / solver.max_iter) ** power
    return base / (1 + math.exp(-gamma * (it - solver.stepsize)))  # sigmoid


def check_solver(solver: pb.SolverParameter, where: str) -> None:
    """The fields Caffe itself requires, and the ones edu_dl does not implement."""
    if not solver.HasField("base_lr"):
        raise CaffeFormatError(f"{where}: the solver has no base_lr")
    if solver.max_iter <= 0:
        raise CaffeFormatError(f"{where}: the solver needs max_iter > 0")
    if solver.lr_policy not in LR_POLICIES:
        raise CaffeFormatError(f"{where}: lr_policy {solver.lr_policy!r} is not one of "
                               f"{', '.join(LR_POLICIES)} (Caffe requires one; use \"fixed\")")
    if solver.lr_policy == "step" and solver.stepsize <= 0:
        raise CaffeFormatError(f"{where}: lr_policy \"step\" needs stepsize > 0")
    if solver.regularization_type not in ("L1", "L2"):
        raise CaffeFormatError(f"{where}: regularization_type must be L1 or L2")
    if solver.iter_size < 1:
        raise CaffeFormatError(f"{where}: iter_size must be at least 1")


class Solver:
    """Caffe's SGD and Adam solvers over a Net's parameters; ``step()`` is one iteration."""

    def __init__(self, solver: pb.SolverParameter, net: Net, where: str = "solver") -> None:
        check_solver(solver, where)
        self.solver, self.net, self.kind = solver, net, solver_type(solver, where)
        self.iter = 0
        self.history: list[Any] = [None] * len(net.params)  # SGD's v, Adam's m
        self.second: list[Any] = [None] * len(net.params)  # Adam's v

    def step(self) -> float:
        """One iteration: forward/backward (iter_size times), then the update; returns the loss."""
        s, params = self.solver, self.net.params
        for p in params:
            p.tensor.grad = None
        total = 0.0
        for _ in range(s.iter_size):  # gradients accumulate in .grad across the calls
            loss, _blobs = self.net.forward()
            loss.backward()
            total += float(loss.item())
        grads = [p.tensor.grad.data if p.tensor.grad is not None else None for p in params]
        if s.clip_gradients >= 0:  # Caffe clips the accumulated sum, before dividing
            norm = math.sqrt(sum(float((g * g).sum()) for g in grads if g is not None))
            if norm > s.clip_gradients:
                grads = [g * (s.clip_gradients / norm) if g is not None else g for g in grads]
        grads = [g / s.iter_size if g is not None and s.iter_size > 1 else g for g in grads]
        rate = learning_rate(s, self.iter)
        for i, (p, g) in enumerate(zip(params, grads)):
            if g is None:
                continue
            w = p.tensor.data
            decay = s.weight_decay * p.decay_mult
            if decay:
                g = g + decay * (w if s.regularization_type == "L2" else p.tensor.xp.sign(w))
            local_rate = rate * p.lr_mult
            if self.kind == "SGD":
                v = local_rate * g if self.history[i] is None else (
                    s.momentum * self.history[i] + local_rate * g)
                self.history[i] = update = v
            else:
                b1, b2, t = s.momentum, s.momentum2, self.iter + 1
                m = (1 - b1) * g if self.history[i] is None else b1 * self.history[i] + (1 - b1) * g
                v = (1 - b2) * g * g if self.second[i] is None else (
                    b2 * self.second[i] + (1 - b2) * g * g)
                self.history[i], self.second[i] = m, v
                correction = math.sqrt(1 - b2**t) / (1 - b1**t)
                update = local_rate * correction * m / (p.tensor.xp.sqrt(v) + s.delta)
            w -= update
        self.iter += 1
        return total / s.iter_size


def _net_path(solver: pb.SolverParameter, solver_path: Path) -> Path:
    name = solver.net or solver.train_net
    if not name:
        raise CaffeFormatError(f"{solver_path}: the solver names no net: add `net: "
                               f"\"net.prototxt\"` or give the net file to `edu-dl train`")
    return resolve(name, solver_path.parent, f"{solver_path}: net")


def build(net_path: str | Path | None, solver_path: str | Path, dtype: Any = np.float32,
          device: str = "cpu") -> tuple[Net, Solver]:
    """The TRAIN net and its solver; ``net_path=None`` takes the solver's ``net:``."""
    solver_path = Path(solver_path)
    solver = read_solver(solver_path)
    if net_path is None:
        if solver.HasField("net_param"):
            raise CaffeFormatError(f"{solver_path}: inline net_param is not supported; put the "
                                   f"net in its own file and name it with `net:`")
        net_path = _net_path(solver, solver_path)
    net_path = Path(net_path)
    seed = solver.random_seed if solver.random_seed >= 0 else None
    rng = np.random.default_rng(seed)
    net_param, sources = read_net(net_path)
    if len(sources) != len(net_param.layer):  # the tokenizer disagrees: lines are unknown
        sources = [LayerSource(str(net_path), 0, 0)] * len(net_param.layer)
    train_param, train_sources = filter_net(net_param, sources, pb.TRAIN)
    net = Net(train_param, train_sources, net_path.parent, dtype=dtype, device=device, rng=rng)
    return net, Solver(solver, net, str(solver_path))


def train(net_path: str | Path | None, solver_path: str | Path, *,
          weights: str | Path | None = None, weights_out: str | Path | None = None,
          dtype: Any = np.float32, device: str = "cpu", display: int | None = None,
          progress: bool = False) -> History:
    """Train the TRAIN phase of ``net_path`` as ``solver_path`` says; returns the History.

    ``weights``: initial weights (.npz keyed ``<layer>/0`` and ``<layer>/1``), as Caffe's
    ``-weights``. ``display``: print the loss every so many iterations (default: the solver's
    ``display``; 0 prints nothing). ``progress``: a tqdm bar on stderr.
    """
    net, solver = build(net_path, solver_path, dtype=dtype, device=device)
    if weights is not None:
        for name in net.load_weights(weights):
            print(f"{weights}: ignoring '{name}' (no such parameter in the net)", file=sys.stderr)
    s = solver.solver
    every = s.display if display is None else display
    recent: deque[float] = deque(maxlen=max(s.average_loss, 1))
    history = History(solver_type=solver.kind)
    bar = tqdm(range(s.max_iter), desc="edu-dl train", unit="iter", file=sys.stderr,
               disable=progress_disabled(progress))
    start = time.perf_counter()
    for it in bar:
        loss = solver.step()
        history.losses.append(loss)
        recent.append(loss)
        if every and it % every == 0:  # Caffe logs the loss smoothed over average_loss
            smoothed = sum(recent) / len(recent)
            tqdm.write(f"Iteration {it}, lr = {learning_rate(s, it):.6g}, loss = {smoothed:.6g}",
                       file=sys.stdout)
    backend.synchronize()
    history.seconds = time.perf_counter() - start
    history.weights = net.weights()
    if weights_out is not None:
        out = Path(weights_out)
        out.parent.mkdir(parents=True, exist_ok=True)
        np.savez(out, **cast(dict[str, Any], history.weights))  # numpy's stub: Any
    return history
