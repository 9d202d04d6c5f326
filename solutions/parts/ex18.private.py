"""Exercise 18, attention: merging two partial softmax results (what a split of the keys over two
workers, or two tiles, leaves to combine), the work a causal tiled kernel skips (how many score
tiles it computes), and attention's backward pass for one head, by hand.

The cases come from real attention problems: queries and keys drawn, the keys split in two sets,
each set's partial (row maximum m, sum l of exp(score - m), normalized output o) computed here;
a causal mask leaves some rows with no key in one set (m = -inf, l = 0, o = 0), and large scores
make exp(m) overflow float64. The oracles: the merge from the partials with the maxima
subtracted; the backward pass from ``edu_dl.attention.attention`` (edu_dl's autograd, float64,
checked against torch in tests/engine/test_attention.py). The mistake replays: the usual wrong
merges, and a backward pass with one step wrong (no 1/sqrt(d), softmax's Jacobian taken as
diagonal, the mask forgotten, a transpose missing).

Judged outside the sandbox: every output against the oracle; for the backward pass, that the
submitted source asks no autograd engine.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from edu_dl.grading.authoring.hints import Mistake, NonFinite, close
from edu_dl.grading.authoring.source import names_check
from edu_dl.grading.authoring.spec import Part, tolerance
from edu_dl.harness.ex18 import BY_HAND, call_backward, call_merge, call_tiles
from edu_dl.harness.mytorch import call_attention

Array = np.ndarray
Case = tuple[Any, ...]
CLOSE = tolerance(rtol=1e-8, atol=1e-10)
RTOL, ATOL = 1e-6, 1e-9  # a replay matches a result this close


# --------------------------------------------------------------------------- 1. merging partials


def _partial(scores: Array, values: Array) -> tuple[Array, Array, Array]:
    """(m, l, o) of one key set: scores (n, k) with -inf where masked, values (k, d_v)."""
    n = scores.shape[0]
    m = scores.max(axis=1) if scores.shape[1] else np.full(n, -np.inf)
    seen = np.isfinite(m)
    with np.errstate(invalid="ignore"):
        p = np.where(seen[:, None], np.exp(scores - np.where(seen, m, 0.0)[:, None]), 0.0)
    l = p.sum(axis=1)
    o = np.zeros((n, values.shape[1]))
    o[seen] = (p[seen] @ values) / l[seen][:, None]
    return m, l, o


def _merge_case(rng: np.random.Generator, n: int, n_k: int, d: int, d_v: int, scale: float,
                causal: bool, swap: bool) -> Case:
    """Queries and keys drawn, the keys split at a random point, each half's partial; with
    ``causal`` query i sees keys 0..i + offset, so late keys are hidden from early rows."""
    q, k = rng.standard_normal((n, d)), rng.standard_normal((n_k, d))
    v = rng.standard_normal((n_k, d_v))
    scores = scale * (q @ k.T) / math.sqrt(d)
    if causal:
        offset = n_k - n
        scores[np.arange(n_k)[None, :] > np.arange(n)[:, None] + offset] = -np.inf
    split = int(rng.integers(1, n_k)) if not causal else max(1, n_k - n + 1)
    first, second = _partial(scores[:, :split], v[:split]), _partial(scores[:, split:], v[split:])
    if swap:
        first, second = second, first
    return (*first, *second)


def _merge_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    # (n, n_k, d, d_v, scale, causal, swap): plain; rows whose second set is hidden (causal);
    # scores near 800, where exp(m) overflows; the empty set first.
    if not hidden:
        specs = [(3, 6, 4, 2, 1.0, False, False), (4, 7, 3, 3, 1.0, True, False),
                 (3, 5, 2, 4, 1000.0, False, False), (5, 8, 4, 2, 1.0, True, True)]
    else:
        specs = [(int(rng.integers(1, 8)), int(rng.integers(8, 16)), int(rng.integers(1, 6)),
                  int(rng.integers(1, 6)), float(scale), causal, bool(rng.integers(0, 2)))
                 for scale, causal in ((1.0, False), (1.0, True), (1000.0, False), (800.0, True))]
    return [_merge_case(rng, *spec) for spec in specs]


def _merge(m1: Array, l1: Array, o1: Array, m2: Array, l2: Array, o2: Array
           ) -> tuple[Array, Array, Array]:
    m = np.maximum(m1, m2)
    shift = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(invalid="ignore"):
        w1 = np.where(l1 > 0, l1 * np.exp(m1 - shift), 0.0)
        w2 = np.where(l2 > 0, l2 * np.exp(m2 - shift), 0.0)
    l = w1 + w2
    return m, l, (w1[:, None] * o1 + w2[:, None] * o2) / l[:, None]


def _mistake(output: int, replay: Any, message: str) -> Mistake:
    """A replayed mistake on ``output``, where it differs from the right answer (d = 1 hides a
    missing 1/sqrt(d), a single key hides the softmax); its overflow or NaN, when that is the
    mistake itself, printed as no warning."""
    def run(e: Any, a: Case) -> Any:
        with np.errstate(all="ignore"):
            value = replay(e, a)
        if value is None or (np.shape(value) == np.shape(e[output])
                             and close(value, e[output], RTOL, ATOL)):
            return None
        return value
    return Mistake(run, message, output=output, rtol=RTOL, atol=ATOL)


def _unscaled_weights(e: Any, a: Case) -> Array:
    _, l1, o1, _, l2, o2 = a
    return (l1[:, None] * o1 + l2[:, None] * o2) / (l1 + l2)[:, None]


def _has_empty(e: Any, a: Case) -> bool:
    return bool(np.isinf(a[0]).any() or np.isinf(a[3]).any())


def _large(e: Any, a: Case) -> bool:
    return bool(np.nanmax(np.abs(np.where(np.isfinite(e[0]), e[0], np.nan))) > 700)


RESCALE = ("l1 and l2 are sums of exp(score - m1) and exp(score - m2): measured against "
           "different maxima, so they cannot be added or compared before each is brought to the "
           "merged maximum m (a factor of exp(m_i - m))")
MERGE_HINTS = (
    NonFinite("NaN or inf where a row saw no key of one set (m = -inf, l = 0): exp(-inf - (-inf)) "
              "is NaN; such a partial must simply weigh nothing", when=_has_empty),
    NonFinite("inf or NaN with scores near 800: exp(800) overflows float64; only differences "
              "m_i - m, never m_i alone, may go into exp", when=_large),
    _mistake(0, lambda e, a: np.minimum(a[0], a[3]),
             "your m is the smaller maximum: the merged row maximum is the larger of m1 and m2"),
    _mistake(1, lambda e, a: a[1] + a[4], RESCALE),
    _mistake(2, _unscaled_weights, RESCALE),
    _mistake(2, lambda e, a: (a[2] + a[5]) / 2,
             "o1 and o2 are not equal partners: each weighs as much as its share of the merged "
             "sum l"),
    _mistake(2, lambda e, a: e[2] * e[1][:, None],
             "o is a weighted average: divide by the merged l"),
)


# --------------------------------------------------------------------------- 2. causal tiles


def _tile_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """(n, block_q, block_k): blocks that divide n, that do not (a partial last tile), unequal
    blocks both ways, one block larger than the sequence."""
    if not hidden:
        # Expected counts 6, 9, 16, 4: none equals the case's own length or size (a shipped
        # helper such as len() must not answer a visible case).
        return [(12, 4, 4), (10, 3, 4), (100, 16, 32), (7, 64, 2)]
    return [(int(rng.integers(1, 300)), int(rng.integers(1, 40)), int(rng.integers(1, 40)))
            for _ in range(5)] + [(4096, 128, 128), (int(rng.integers(50, 200)), 7, 5)]


def _tiles(n: int, block_q: int, block_k: int) -> int:
    """Every (query block, key block) pair whose first key is not after the block's last query."""
    count = 0
    for q0 in range(0, n, block_q):
        last_query = min(q0 + block_q, n) - 1
        count += sum(1 for k0 in range(0, n, block_k) if k0 <= last_query)
    return count


def _tiles_with(n: int, block_q: int, block_k: int, keep: Any) -> int:
    """Tiles counted by a wrong rule ``keep(k0, first_query, last_query)``."""
    count = 0
    for q0 in range(0, n, block_q):
        count += sum(1 for k0 in range(0, n, block_k) if keep(k0, q0, min(q0 + block_q, n) - 1))
    return count


def _tile_mistake(replay: Any, message: str) -> Mistake:
    def run(e: Any, a: Case) -> Any:
        value = replay(*(int(x) for x in a))  # None: the mistake does not apply here
        return None if value is None or int(value) == int(e) else int(value)
    return Mistake(run, message, rtol=0.0, atol=0.0)


def _diagonal_tiles(n: int, block_q: int, block_k: int) -> int:
    """Tiles the diagonal crosses: some of their scores visible (a key at or before a query),
    some masked (a key after a query)."""
    count = 0
    for q0 in range(0, n, block_q):
        last_query = min(q0 + block_q, n) - 1
        count += sum(1 for k0 in range(0, n, block_k)
                     if k0 <= last_query and min(k0 + block_k, n) - 1 > q0)
    return count


def _every_tile(n: int, block_q: int, block_k: int) -> int:
    return -(-n // block_q) * -(-n // block_k)


def _triangle(blocks: int) -> int:
    """T (T + 1) / 2: the tiles on and below the diagonal of T x T square tiles."""
    return blocks * (blocks + 1) // 2


def _every_or_diagonal_twice(n: int, block_q: int, block_k: int) -> int | None:
    """Every tile, where that count is also the needed tiles with the diagonal ones counted twice
    (e.g. 3 x 3 square tiles): one value, two mistakes, one hint that names both."""
    every = _every_tile(n, block_q, block_k)
    return every if every == _tiles(n, block_q, block_k) + _diagonal_tiles(n, block_q, block_k) \
        else None


DIAGONAL = "a tile the diagonal i = j crosses"  # some scores visible, some masked
SQUARE_TRIANGLE = ("a triangle of square tiles, T (T + 1) / 2: here block_q != block_k, so the "
                   "tiles are not square and each query block needs its own count of key tiles, "
                   "up to the one that holds its last query")


TILE_HINTS = (
    _tile_mistake(lambda n, bq, bk: _every_or_diagonal_twice(n, bq, bk),
                  "that is every tile, and also the needed tiles with the diagonal ones counted "
                  "twice: count " + DIAGONAL + " once, and skip a tile whose first key comes "
                  "after its block's last query (it holds only masked scores)"),
    _tile_mistake(lambda n, bq, bk: -(-n // bq) * -(-n // bk),
                  "that is every tile: a tile whose first key comes after its block's last query "
                  "holds only masked scores, and the kernel skips it"),
    _tile_mistake(lambda n, bq, bk: _tiles_with(n, bq, bk, lambda k0, first, last: k0 <= first),
                  "a tile is needed while its first key is at or before the block's LAST query, "
                  "not its first: later queries of the block see further"),
    _tile_mistake(lambda n, bq, bk: _tiles_with(n, bq, bk, lambda k0, first, last: k0 < last),
                  "one tile short per query block: the tile whose first key equals the block's "
                  "last query is needed (a query sees itself, j <= i)"),
    _tile_mistake(lambda n, bq, bk: sum(min(q0 + bq, n) // bk for q0 in range(0, n, bq)),
                  "a partial key tile (fewer than block_k keys, at the diagonal or at the end) "
                  "still has to be computed: round up, not down"),
    _tile_mistake(lambda n, bq, bk: _tiles(n, bq, bk) - _diagonal_tiles(n, bq, bk),
                  "the diagonal tiles are missing: " + DIAGONAL + " holds visible scores as "
                  "well as masked ones, so the kernel computes it"),
    _tile_mistake(lambda n, bq, bk: _tiles(n, bq, bk) + _diagonal_tiles(n, bq, bk),
                  "the diagonal tiles are counted twice: " + DIAGONAL + " is computed once, "
                  "like every other tile"),
    _tile_mistake(lambda n, bq, bk: _triangle(-(-n // bq)) if bq != bk else None,
                  SQUARE_TRIANGLE),
    _tile_mistake(lambda n, bq, bk: _triangle(-(-n // bk)) if bq != bk else None,
                  SQUARE_TRIANGLE),
)


# --------------------------------------------------------------------------- 3. backward


def _backward_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    # (n_q, n_k, d, d_v, causal): a square one first, where a missing transpose shows in the
    # values (and gets its hint), then a rectangular one, where it fails on the shapes; causal
    # with more keys than queries too.
    if not hidden:
        specs = [(4, 4, 3, 3, False), (3, 5, 4, 2, False), (5, 5, 4, 2, True), (2, 2, 1, 1, True)]
    else:
        n = int(rng.integers(2, 9))
        specs = [(int(rng.integers(1, 9)), int(rng.integers(1, 9)), int(rng.integers(1, 7)),
                  int(rng.integers(1, 7)), False), (n, n, 4, 3, False),
                 (n, n, int(rng.integers(1, 7)), int(rng.integers(1, 7)), True),
                 (n, n + 3, 2, 5, True)]
    cases: list[Case] = []
    for n_q, n_k, d, d_v, causal in specs:
        cases.append((rng.standard_normal((n_q, d)), rng.standard_normal((n_k, d)),
                      rng.standard_normal((n_k, d_v)), rng.standard_normal((n_q, d_v)),
                      causal))
    return cases


def _backward_expected(q: Array, k: Array, v: Array, dout: Array, causal: Any
                       ) -> tuple[Array, Array, Array]:
    import edu_dl as ed
    from edu_dl import attention

    tq, tk, tv = (ed.tensor(np.asarray(a, dtype=np.float64), requires_grad=True)
                  for a in (q, k, v))
    attention.attention(tq, tk, tv, causal=bool(causal)).backward(
        np.asarray(dout, dtype=np.float64))
    grads = [t.grad for t in (tq, tk, tv)]
    assert all(g is not None for g in grads)
    return tuple(g.numpy() for g in grads if g is not None)  # type: ignore[return-value]


def _probabilities(q: Array, k: Array, causal: bool, mask: bool = True) -> Array:
    s = q @ k.T / math.sqrt(q.shape[1])
    if causal and mask:
        s[np.arange(k.shape[0])[None, :] > np.arange(q.shape[0])[:, None]] = -np.inf
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True)


def _wrong_backward(a: Case, softmax: str = "full", scaled: bool = True, mask: bool = True,
                    dk_transposed: bool = True) -> tuple[Array, Array, Array]:
    """The backward pass with one step changed, for the replays."""
    q, k, v, dout, causal = a
    p = _probabilities(q, k, bool(causal), mask)
    dp = dout @ v.T
    if softmax == "full":
        ds = p * (dp - (dp * p).sum(axis=1, keepdims=True))
    elif softmax == "diagonal":
        ds = p * (1 - p) * dp
    else:  # "none": the softmax's own Jacobian forgotten
        ds = p * dp
    scale = 1.0 / math.sqrt(q.shape[1]) if scaled else 1.0
    dk = (ds.T @ q if dk_transposed else ds @ q) * scale
    return ds @ k * scale, dk, p.T @ dout


JACOBIAN = ("softmax's Jacobian is not diagonal: every probability of a row depends on every "
            "score of that row, so dS gets a term from the whole row (the lecture's softmax VJP)")
SCALE = ("sqrt(d) times too large: the scores are q k^T / sqrt(d), so the same 1/sqrt(d) "
         "multiplies dq and dk")
FUTURE = ("lets queries attend to future keys: the backward pass uses the same masked "
          "probabilities as the forward pass (0 where j > i)")
BACKWARD_HINTS = (
    _mistake(0, lambda e, a: _wrong_backward(a, scaled=False)[0], f"your dq is {SCALE}"),
    _mistake(1, lambda e, a: _wrong_backward(a, scaled=False)[1], f"your dk is {SCALE}"),
    _mistake(2, lambda e, a: _wrong_backward(a, mask=False)[2] if bool(a[4]) else None,
             f"your dv {FUTURE}"),
    _mistake(0, lambda e, a: _wrong_backward(a, mask=False)[0] if bool(a[4]) else None,
             f"your dq {FUTURE}"),
    _mistake(0, lambda e, a: _wrong_backward(a, softmax="diagonal")[0], JACOBIAN),
    _mistake(0, lambda e, a: _wrong_backward(a, softmax="none")[0], JACOBIAN),
    _mistake(1, lambda e, a: _wrong_backward(a, dk_transposed=False)[1],
             "your dk collects over the wrong axis: key j's gradient sums over the queries that "
             "scored it, a column of dS, not a row"),
    _mistake(2, lambda e, a: _probabilities(a[0], a[1], bool(a[4])) @ a[3]
             if a[0].shape[0] == a[1].shape[0] else None,
             "your dv is P applied the wrong way round: value j receives from every query that "
             "attended to it, with weight P[i, j] (a sum over i)"),
)


# --------------------------------------------------------------------------- your framework's op
# attention recorded on the student's own tape (edu_dl.harness.mytorch drives it), its vjp their
# attention_backward; the oracle is the course's engine, as for the backward above.


def _layer_expected(q: Array, k: Array, v: Array, dout: Array, causal: Any
                    ) -> tuple[Array, ...]:
    import edu_dl as ed
    from edu_dl import attention

    tq, tk, tv = (ed.tensor(np.asarray(a, dtype=np.float64)) for a in (q, k, v))
    out = attention.attention(tq, tk, tv, causal=bool(causal))
    return (out.numpy(), *_backward_expected(q, k, v, dout, causal))


OWN_ENGINE = names_check(forbidden=[(
    ("torch", "edu_dl", "autograd", "tensorflow", "jax", "scaled_dot_product_attention"),
    "your framework runs on your own engine: record the forward pass on your tape with your "
    "attention_backward as its vjp (no torch, edu_dl, TensorFlow or JAX)")])


PARTS = [
    Part(
        id="ex18.merge_partials", points=3, cases=_merge_cases, expected=_merge,
        compare=CLOSE, call=call_merge, hints=MERGE_HINTS,
        arg_names=("m1", "l1", "o1", "m2", "l2", "o2"), output_names=("m", "l", "o"),
    ),
    Part(
        id="ex18.causal_tiles", points=2, cases=_tile_cases, expected=_tiles,
        compare=tolerance(rtol=0.0, atol=0.0), call=call_tiles, hints=TILE_HINTS,
        arg_names=("n", "block_q", "block_k"),
    ),
    Part(
        id="ex18.attention_backward", points=4, cases=_backward_cases,
        expected=_backward_expected, compare=CLOSE, call=call_backward, hints=BACKWARD_HINTS,
        source_check=BY_HAND, timeout_s=20.0,
        arg_names=("q", "k", "v", "dout", "causal"), output_names=("dq", "dk", "dv"),
    ),
    Part(
        id="ex18.my_attention", points=2, cases=_backward_cases, expected=_layer_expected,
        compare=CLOSE, call=call_attention, source_check=OWN_ENGINE, timeout_s=20.0,
        arg_names=("q", "k", "v", "dout", "causal"), output_names=("out", "dq", "dk", "dv"),
        uses=("ex18.attention_backward",),
    ),
]
