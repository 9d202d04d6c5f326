"""Can CuPy capture the fused plan's GPU step in a CUDA graph? If so: equal results, and time."""
import json
import os
import time
import traceback

import cupy as cp
import numpy as np

from edu_dl import graph as eg
from edu_dl.bench.problems import make_problem

out = {}
p = make_problem("lecture")
g = eg.Graph()
with g.as_default():
    x = eg.placeholder(eg.float32, shape=(None, p.spec.D_in), name="x")
    y = eg.placeholder(eg.float32, shape=(None, p.spec.D_out), name="y")
    w1, w2 = eg.Variable(p.weights["w1"], name="w1"), eg.Variable(p.weights["w2"], name="w2")
    y_pred = eg.matmul(eg.nn.relu(eg.matmul(x, w1)), w2)
    loss = eg.reduce_mean(eg.reduce_sum((y_pred - y) ** 2, axis=1))
    train = eg.train.GradientDescentOptimizer(p.spec.lr("sgd")).minimize(loss)
    init = eg.global_variables_initializer()
sess = eg.Session(g, device="gpu", optimize="numba")
sess.run(init)
feed = {x: cp.asarray(p.X), y: cp.asarray(p.Y)}
fetches = [loss, train]
for _ in range(3):
    sess.run(fetches, feed_dict=feed)
plan = sess.plan_for(fetches, feed)
fused = plan.fused
out["fused"] = fused is not None
seen = []
fn = fused.fn
def recording(*args):
    seen.append(args)
    return fn(*args)
fused.fn = recording
sess.run(fetches, feed_dict=feed)
fused.fn = fn
args = seen[-1]
out["args"] = [f"{type(a).__name__}{getattr(a, 'shape', '')}" for a in args]
variables = [a for a in args if isinstance(a, cp.ndarray) and a.shape in ((1000, 100), (100, 10))]
start = [v.copy() for v in variables]
sync = cp.cuda.Device().synchronize

def restore():
    for v, s in zip(variables, start):
        v[...] = s
    sync()

restore()
for _ in range(5):
    fn(*args)
sync()
eager_w = [v.get() for v in variables]
restore()
stream = cp.cuda.Stream(non_blocking=True)
try:
    with stream:
        stream.begin_capture()
        fn(*args)
        graph = stream.end_capture()
    out["captured"] = True
except Exception as exc:
    out["captured"] = False
    out["capture_error"] = f"{type(exc).__name__}: {exc}"
    out["traceback"] = traceback.format_exc()[-1500:]
if out["captured"]:
    restore()
    for _ in range(5):
        graph.launch(stream)
    stream.synchronize()
    graph_w = [v.get() for v in variables]
    out["max_rel_diff"] = max(float(np.max(np.abs(a - b)) / np.max(np.abs(a))) for a, b in zip(eager_w, graph_w))
    n = 300
    times = {"fused step (CuPy calls)": [], "fused step replayed as a CUDA graph": []}
    for _ in range(7):
        sync(); t = time.perf_counter()
        for _ in range(n):
            fn(*args)
        sync(); times["fused step (CuPy calls)"].append((time.perf_counter() - t) / n)
        stream.synchronize(); t = time.perf_counter()
        for _ in range(n):
            graph.launch(stream)
        stream.synchronize(); times["fused step replayed as a CUDA graph"].append((time.perf_counter() - t) / n)
    out["median_us"] = {k: float(np.median(v)) * 1e6 for k, v in times.items()}
    out["rounds_ratio"] = [b / a for a, b in zip(*times.values())]
out["versions"] = {"cupy": cp.__version__, "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode()}
out["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
print(json.dumps(out, indent=1))
with open(os.path.join(os.environ.get("OUT", "/tmp"), "cuda_graph_probe.json"), "w") as f:
    json.dump(out, f, indent=1)
