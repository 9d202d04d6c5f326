"""Every twin trains the same model to the same numbers, and each is the real framework thing."""

from __future__ import annotations

import functools
import json
import os

import numpy as np
import pytest

import edu_dl
from edu_dl.models import spec as models
from edu_dl.twins import TWINS, History, get_twin, tf_device, torch_device

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

STEPS = 12
# Relative error allowed against the NumPy float64 reference, for SGD and Adam alike: float64
# twins agree to ~1e-15 in practice; float32 ones to ~1e-6 over these steps.
RTOL = {np.float64: 1e-8, np.float32: 1e-4}
SPECS = {
    "mean_row_sum": models.TwoLayerNet(16, 24, 12, 8, "mean_row_sum"),
    "sum": models.TwoLayerNet(16, 24, 12, 8, "sum"),
    "euclidean": models.TwoLayerNet(16, 24, 12, 8, "euclidean"),
    "cross_entropy": models.DigitsClassifier(N=64),
}
# (loss, optimizer, dtype): every loss and both optimizers in float64, the lecture's loss in float32
CASES = [(loss, opt, np.float64) for loss in SPECS for opt in models.OPTIMIZERS] + [
    ("mean_row_sum", opt, np.float32) for opt in models.OPTIMIZERS]


@functools.cache
def reference(loss: str, optimizer: str) -> History:
    """NumPy with hand-written gradients, float64."""
    spec = SPECS[loss]
    X, Y = spec.make_data()
    return get_twin("numpy")(spec, X, Y, STEPS, spec.lr(optimizer), optimizer)


def run(twin: str, loss: str, optimizer: str, dtype=np.float64, steps: int = STEPS) -> History:
    spec = SPECS[loss]
    X, Y = spec.make_data(dtype)
    return get_twin(twin)(spec, X, Y, steps, spec.lr(optimizer), optimizer, dtype=dtype)


def rel_error(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


@pytest.mark.parametrize("loss, optimizer, dtype", CASES,
                         ids=[f"{l}-{o}-{np.dtype(d).name}" for l, o, d in CASES])
@pytest.mark.parametrize("twin", list(TWINS))
def test_every_twin_gives_the_same_losses_and_weights(twin, loss, optimizer, dtype):
    ref = reference(loss, optimizer)
    h = run(twin, loss, optimizer, dtype)
    assert len(h.losses) == len(h.seconds) == STEPS
    assert all(s > 0 for s in h.seconds)
    assert h.losses[-1] < h.losses[0], "the chosen rate must train"
    # the loss at every step: before each update, the same number in every framework
    for t, (got, want) in enumerate(zip(h.losses, ref.losses)):
        assert abs(got - want) <= RTOL[dtype] * abs(want), f"step {t}: {got} != {want}"
    for name in models.WEIGHT_NAMES:
        assert h.weights[name].dtype == dtype and isinstance(h.weights[name], np.ndarray)
        assert rel_error(h.weights[name], ref.weights[name]) < RTOL[dtype], name
    # and they did move: comparing unchanged weights would prove nothing
    init = SPECS[loss].init_weights()
    assert rel_error(h.weights["w1"], init["w1"]) > 1e-3


def test_float64_tolerance_tells_float32_numbers_apart():
    """The parity test can fail: starting from float32-rounded weights already breaks 1e-8."""
    spec = SPECS["mean_row_sum"]
    X, Y = spec.make_data()
    rounded = {k: v.astype(np.float32) for k, v in spec.init_weights().items()}
    h = get_twin("numpy")(spec, X, Y, STEPS, spec.lr("adam"), "adam", weights=rounded)
    ref = reference("mean_row_sum", "adam")
    assert rel_error(h.weights["w1"], ref.weights["w1"]) > RTOL[np.float64]
    assert rel_error(h.weights["w1"], ref.weights["w1"]) < RTOL[np.float32]


def test_tf1_twins_build_a_graph_and_run_a_session():
    import tensorflow as tf

    fed = run("tf1_feed", "mean_row_sum", "sgd", steps=2)
    graph = fed.info["graph"]
    assert isinstance(graph, tf.Graph)
    placeholders = {op.name for op in graph.get_operations() if op.type == "Placeholder"}
    assert placeholders == {"x", "y", "w1", "w2"}  # weights fed every step
    assert fed.info["fed"] == ["w1:0", "w2:0", "x:0", "y:0"]

    kept = run("tf1", "mean_row_sum", "sgd", steps=2)
    graph = kept.info["graph"]
    placeholders = {op.name for op in graph.get_operations() if op.type == "Placeholder"}
    assert placeholders == {"x", "y"}  # weights stay in the graph as Variables
    assert kept.info["fed"] == ["x:0", "y:0"]
    variables = {op.name for op in graph.get_operations() if op.type == "VarHandleOp"}
    assert {"w1", "w2"} <= variables
    assert any(op.type.startswith("ResourceApplyGradientDescent")
               for op in graph.get_operations())  # GradientDescentOptimizer.minimize
    # eager execution was never switched off for the process
    assert tf.executing_eagerly()


def test_tf_function_twins_trace_once_and_reuse_the_graph():
    import tensorflow as tf

    for twin, jit in (("tf_function", False), ("tf_function_xla", True)):
        h = run(twin, "mean_row_sum", "adam", steps=5)
        assert isinstance(h.native, tf.types.experimental.PolymorphicFunction)
        assert h.info["tracing_count"] == 1  # traced on step 1, reused on steps 2..5
        assert h.info["jit_compile"] is jit
    eager = run("tf2_eager", "mean_row_sum", "sgd", steps=2)
    assert eager.info["executing_eagerly"] is True and eager.native is None


def test_keras_twin_trains_with_fit_and_returns_its_history():
    import keras

    h = run("keras", "sum", "adam", steps=4)
    assert isinstance(h.native, keras.callbacks.History)
    assert h.native.params["epochs"] == 4 and h.native.params["steps"] == 1  # full batch
    assert h.native.history["loss"] == pytest.approx(h.losses, rel=1e-12)
    assert h.info["optimizer"] == "TorchAdam"
    assert keras.config.floatx() == "float32"  # the float64 run put Keras's default back


def test_torch_custom_function_backward_is_the_one_that_runs(monkeypatch):
    from edu_dl.twins.torch_custom import MyReLU

    h = run("torch_custom", "mean_row_sum", "sgd", steps=3)
    assert h.info["backward_calls"] == 3
    # Break our backward: if autograd used its own ReLU gradient, w1 would still train.
    monkeypatch.setattr(MyReLU, "backward", staticmethod(lambda ctx, g: g * 0))
    frozen = run("torch_custom", "mean_row_sum", "sgd", steps=3)
    assert np.array_equal(frozen.weights["w1"], SPECS["mean_row_sum"].init_weights()["w1"])
    assert not np.array_equal(frozen.weights["w2"], SPECS["mean_row_sum"].init_weights()["w2"])


def test_torch_nn_uses_torch_optim_and_edu_static_feeds_only_the_data():
    h = run("torch_nn", "mean_row_sum", "adam", steps=2)
    assert h.info["optimizer"] == "Adam"
    static = run("edu_static", "mean_row_sum", "sgd", steps=2)
    assert isinstance(static.native, edu_dl.graph.Graph)
    assert static.info["fed"] == ["x", "y"]


@pytest.mark.parametrize("twin", ["numpy", "edu_eager", "torch_raw", "tf2_eager"])
def test_bad_input_is_a_clear_error_naming_the_twin_and_shapes(twin):
    spec = SPECS["mean_row_sum"]
    X, Y = spec.make_data()
    train = get_twin(twin)
    with pytest.raises(ValueError, match=rf"{twin}: X has shape \(16, 5\).*\(16, 24\)"):
        train(spec, X[:, :5], Y, 2, 0.01)
    with pytest.raises(ValueError, match=rf"{twin}: Y has shape \(16,\)"):
        train(spec, X, Y[:, 0], 2, 0.01)
    with pytest.raises(ValueError, match="unknown optimizer 'rmsprop'"):
        train(spec, X, Y, 2, 0.01, optimizer="rmsprop")
    with pytest.raises(ValueError, match=f"{twin}: dtype must be float32 or float64"):
        train(spec, X, Y, 2, 0.01, dtype=np.int32)
    with pytest.raises(ValueError, match=f"{twin}: weights have shapes"):
        train(spec, X, Y, 2, 0.01, weights={"w1": np.zeros((2, 2)), "w2": np.zeros((2, 2))})


def test_unknown_twin_and_missing_gpu_are_clear_errors():
    with pytest.raises(ValueError, match="unknown twin 'mxnet'"):
        get_twin("mxnet")
    if not edu_dl.gpu_status()[0]:
        spec = SPECS["mean_row_sum"]
        X, Y = spec.make_data()
        with pytest.raises(edu_dl.backend.DeviceError, match="No GPU"):
            get_twin("numpy")(spec, X, Y, 2, 0.01, device="gpu")



@pytest.mark.parametrize(("to_device", "framework", "gpu_name"),
                         [(torch_device, "torch", "cuda"), (tf_device, "tensorflow", "/GPU:0")])
def test_framework_device_asks_the_backend_and_says_why_not(monkeypatch, to_device, framework,
                                                            gpu_name):
    asked: list[str] = []

    def no_gpu(name="cupy"):
        asked.append(name)
        return False, f"{name} sees no GPU in this test"

    monkeypatch.setattr(edu_dl.backend, "gpu_status", no_gpu)
    with pytest.raises(edu_dl.backend.DeviceError,
                       match=f"No GPU is available: {framework} sees no GPU in this test"):
        to_device("gpu")
    assert asked == [framework]
    assert to_device("cpu") in ("cpu", "/CPU:0")
    monkeypatch.setattr(edu_dl.backend, "gpu_status", lambda name="cupy": (True, "a GPU"))
    assert to_device("gpu") == gpu_name

@pytest.mark.gpu
@pytest.mark.skipif(not edu_dl.gpu_status()[0], reason="no CUDA GPU here")
@pytest.mark.parametrize("optimizer", models.OPTIMIZERS)
@pytest.mark.parametrize("twin", ["numpy", "edu_eager", "edu_static"])
def test_cupy_twins_match_the_cpu(twin, optimizer):
    spec = SPECS["mean_row_sum"]
    X, Y = spec.make_data()
    h = get_twin(twin)(spec, X, Y, STEPS, spec.lr(optimizer), optimizer, device="gpu")
    ref = reference("mean_row_sum", optimizer)
    assert h.twin == ("cupy" if twin == "numpy" else twin)
    assert np.allclose(h.losses, ref.losses, rtol=1e-8, atol=0)
    for name in models.WEIGHT_NAMES:
        assert rel_error(h.weights[name], ref.weights[name]) < 1e-8


@pytest.mark.usefixtures("numpy_as_cupy")
@pytest.mark.parametrize("optimizer", models.OPTIMIZERS)
@pytest.mark.parametrize("twin", ["numpy", "edu_eager", "edu_static"])
def test_cupy_twins_on_numpy_as_cupy(twin, optimizer):
    """The test above where CI has no GPU: NumPy stands in for CuPy, so each twin's device='gpu'
    path (its arrays moved, its losses read back) runs."""
    test_cupy_twins_match_the_cpu(twin, optimizer)


def test_bench_twins_writes_a_table_csv_json_and_plot(tmp_path, capsys):
    from edu_dl.cli import main

    assert main(["bench", "twins", "--model", "tiny", "--twins", "numpy,edu_eager",
                 "--steps", "3", "--out", str(tmp_path)]) == 0
    table = capsys.readouterr().out
    assert "| numpy |" in table and "| edu_eager |" in table
    data = json.loads((tmp_path / "twins.json").read_text())
    rows = {r["twin"]: r for r in data["results"]}
    assert rows["numpy"]["ratio"] == 1.0 and rows["edu_eager"]["seconds"] > 0
    # each worker trained the same model from the same weights
    assert rows["numpy"]["first_loss"] == pytest.approx(rows["edu_eager"]["first_loss"],
                                                        rel=1e-5)
    assert rows["numpy"]["last_loss"] < rows["numpy"]["first_loss"]
    assert (tmp_path / "twins.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "twins.csv").read_text().startswith("twin,seconds,ratio")
    assert main(["bench", "twins", "--twins", "mxnet", "--out", str(tmp_path)]) == 2
