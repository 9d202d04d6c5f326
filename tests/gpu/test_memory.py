"""The memory budget: hand-counted bytes for a tiny MLP, torch's own optimizer state, activations
counted on the meta device equal to those on the CPU, max_batch and the out-of-memory back-off."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from fixtures.frameworks import lazy, torch
from hypothesis import given, settings
from hypothesis import strategies as st

from edu_dl.util.units import GiB

# torch.nn and the two modules below import torch: loaded when a test first uses them.
nn = lazy("torch.nn")
memory = lazy("edu_dl.gpu.memory")
zoo = lazy("edu_dl.gpu.zoo")


def mlp(sizes: list[int], device: str = "meta") -> nn.Sequential:
    return zoo.mlp(sizes, device=device)


def test_tiny_mlp_by_hand() -> None:
    # Linear(4, 5), ReLU, Linear(5, 3): 4*5 + 5 + 5*3 + 3 = 43 parameters.
    # Saved for backward: the input (7 x 4, for the first weight's gradient) and the ReLU's
    # output (7 x 5: ReLU's own backward and the second weight's gradient share it).
    b = memory.budget(mlp([4, 5, 3]), (4,), 7, "adam")
    assert (b.params, b.grads, b.optimizer_state, b.activations) == (172, 172, 344, 252)
    assert b.total == 940 and b.batch_size == 7 and b.dtype == "float32"
    assert memory.budget(mlp([4, 5, 3]), (4,), 7, "sgd_momentum").optimizer_state == 172
    assert memory.budget(mlp([4, 5, 3]), (4,), 7, "sgd").optimizer_state == 0
    half = memory.budget(mlp([4, 5, 3]), (4,), 7, "adam", torch.float16)
    assert (half.params, half.optimizer_state, half.activations) == (86, 172, 126)
    assert memory.budget(mlp([4, 5, 3]), (4,), 7, "adam", torch.float64).total == 2 * 940


@pytest.mark.parametrize("optimizer", ["sgd", "sgd_momentum", "adam"])
def test_optimizer_state_equals_torch(optimizer: str) -> None:
    model = mlp([6, 8, 8, 2], device="cpu")
    opt = {"sgd": lambda p: torch.optim.SGD(p, lr=0.1),
           "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
           "adam": lambda p: torch.optim.Adam(p, lr=0.1)}[optimizer](model.parameters())
    model(torch.randn(5, 6)).square().sum().backward()
    opt.step()
    grads = sum(p.grad.nbytes for p in model.parameters() if p.grad is not None)
    state = sum(t.nbytes for s in opt.state.values() for name, t in s.items()
                if isinstance(t, torch.Tensor) and name != "step")  # Adam's step counters
    assert grads == memory.parameter_bytes(model)
    assert state == memory.optimizer_state_bytes(model, optimizer)


def small_cnn(device: str) -> nn.Sequential:
    with torch.device(device):
        return nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
            nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, stride=2), nn.ReLU(), nn.Dropout(0.25),
            nn.Flatten(), nn.Linear(16 * 3 * 3, 10))


@pytest.mark.parametrize("dtype_name", ["float32", "float64"])
@pytest.mark.parametrize("batch_size", [1, 5])
def test_activations_on_meta_equal_cpu(dtype_name: str, batch_size: int) -> None:
    dtype = getattr(torch, dtype_name)
    meta = memory.saved_activations(small_cnn("meta"), (3, 16, 16), batch_size, dtype)
    cpu_model = small_cnn("cpu").to(dtype)
    cpu = memory.saved_activations(cpu_model, (3, 16, 16), batch_size)
    assert meta == cpu
    assert cpu_model.training  # put back as found
    # max-pool's indices are int64 whatever the float type
    assert torch.int64 in {s.dtype for s in meta}


def test_activations_of_a_real_network_on_meta_equal_cpu() -> None:
    cpu = memory.activation_bytes(zoo.resnet50(device="cpu"), (3, 32, 32), 2)
    assert cpu == memory.activation_bytes(zoo.resnet50(), (3, 32, 32), 2)


def test_activations_grow_linearly_with_the_batch() -> None:
    model = zoo.vgg16()
    one, four = (memory.activation_bytes(model, zoo.IMAGE_SHAPE, b) for b in (1, 4))
    assert four == 4 * one


def test_eval_mode_is_kept() -> None:
    model = small_cnn("meta").eval()
    memory.activation_bytes(model, (3, 16, 16), 2)
    assert not model.training


def test_dtype_of_a_cpu_model_is_not_converted_behind_its_back() -> None:
    with pytest.raises(ValueError, match="meta-device model"):
        memory.activation_bytes(small_cnn("cpu"), (3, 16, 16), 2, torch.float16)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="unknown optimizer 'rmsprop'"):
        memory.budget(mlp([2, 2]), (2,), 1, "rmsprop")
    with pytest.raises(ValueError, match="batch_size must be at least 1"):
        memory.budget(mlp([2, 2]), (2,), 0)


def fits(model: nn.Module, batch: int, budget: float) -> bool:
    return memory.budget(model, (4,), batch, "adam").total <= budget


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 20_000), st.integers(0, 20_000))
def test_max_batch_is_the_largest_that_fits_and_monotonic(a: int, b: int) -> None:
    model = mlp([4, 5, 3])
    low, high = sorted((a, b))
    m_low, m_high = (memory.max_batch(model, (4,), x) for x in (low, high))
    assert m_low <= m_high
    if m_low == 0:
        assert not fits(model, 1, low)
    else:
        assert fits(model, m_low, low) and not fits(model, m_low + 1, low)


@pytest.mark.parametrize("shape", ["affine", "quadratic", "flat then steep"])
def test_max_batch_solves_an_affine_total_in_four_passes_and_searches_otherwise(
        monkeypatch: pytest.MonkeyPatch, shape: str) -> None:
    """Each budget() is a forward pass: an affine total (fixed + b * per example) is solved and
    checked in four; any other shape falls back to the search, with the same answer as trying
    every batch."""
    grows = {"affine": lambda b: 1000 + 37 * b, "quadratic": lambda b: 1000 + b * b,
             "flat then steep": lambda b: 1000 if b < 50 else 1000 + 90 * b}[shape]
    calls: list[int] = []

    def fake_budget(model: object, input_shape: object, b: int, *args: object) -> SimpleNamespace:
        calls.append(b)
        return SimpleNamespace(total=grows(b))

    monkeypatch.setattr("edu_dl.gpu.memory.budget", fake_budget)
    for budget in (999, 1037, 5000, 123_456):
        calls.clear()
        found = memory.max_batch(mlp([2, 2]), (2,), budget, limit=4096)
        fitting = [b for b in range(1, 4097) if grows(b) <= budget]
        assert found == (max(fitting) if fitting else 0), (shape, budget, found)
        if shape == "affine":
            assert len(calls) <= 4, calls


@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
def test_max_batch_limit_and_large_models() -> None:
    assert memory.max_batch(mlp([4, 5, 3]), (4,), 1e12, limit=1000) == 1000
    resnet = zoo.resnet50()
    in_16 = memory.max_batch(resnet, zoo.IMAGE_SHAPE, 16 * GiB, "sgd_momentum")
    in_80 = memory.max_batch(resnet, zoo.IMAGE_SHAPE, 80 * GiB, "sgd_momentum")
    assert 0 < in_16 < in_80
    assert memory.budget(resnet, zoo.IMAGE_SHAPE, in_16, "sgd_momentum").total <= 16 * GiB
    assert memory.budget(resnet, zoo.IMAGE_SHAPE, in_16 + 1, "sgd_momentum").total > \
        16 * GiB


def test_fit_batch_halves_until_the_step_fits() -> None:
    model = mlp([4, 5, 3])
    capacity = memory.budget(model, (4,), 100, "adam").total
    step = memory.simulated_step(model, (4,), capacity)
    lines: list[str] = []
    batch, result = memory.fit_batch(step, 512, log=lines.append)
    assert batch == 64 and result.batch_size == 64 and result.total <= capacity
    assert len(lines) == 3 and lines[0].startswith(
        "batch 512: OutOfMemoryError: (simulated) a step at batch 512 needs")
    with pytest.raises(torch.OutOfMemoryError):
        memory.fit_batch(memory.simulated_step(model, (4,), 10), 8, log=None)
