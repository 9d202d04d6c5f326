"""The loader: order, prefetching (proved by events, not timings), shutdown, errors."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import numpy as np
import pytest

import edu_dl
from edu_dl.data import (
    ArrayDataset,
    DataError,
    DataLoader,
    LoaderError,
    ShardedDataset,
    SlowReader,
    write_shards,
)

ROWS, FEATURES = 50, 3
WAIT_S = 10.0  # generous: only reached when the loader is broken


def loader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("edu_dl-loader")]


@pytest.fixture(autouse=True)
def _no_thread_left_behind():
    """Every test ends with no reader thread running."""
    yield
    if loader_threads():  # a dropped loader's readers stop when it is collected; a full
        gc.collect()  # collection costs a second in a worker that holds torch, TF and JAX
    for thread in loader_threads():
        thread.join(WAIT_S)
    assert loader_threads() == []


@pytest.fixture
def arrays() -> tuple[np.ndarray, np.ndarray]:
    # Row r holds r in every feature, so a batch shows which rows it carries.
    X = np.repeat(np.arange(ROWS, dtype=np.float32)[:, None], FEATURES, axis=1)
    y = np.arange(ROWS, dtype=np.int64) * 10
    return X, y


@pytest.fixture
def on_disk(tmp_path: Path, arrays: tuple[np.ndarray, np.ndarray]) -> ShardedDataset:
    X, y = arrays
    write_shards(tmp_path / "ds", shard_rows=7, X=X, y=y)  # 8 shards, the last one short
    return ShardedDataset(tmp_path / "ds")


def rows_of(loader: DataLoader) -> list[list[int]]:
    return [X[:, 0].astype(int).tolist() for X, _ in loader]


class Recorder:
    """A dataset that logs when each batch's read starts, for the overlap test."""

    def __init__(self, dataset: ShardedDataset) -> None:
        self.dataset = dataset
        self.log: list[tuple[str, int]] = []
        self.lock = threading.Lock()
        self.started: dict[int, threading.Event] = {}

    def batch_of(self, indices: np.ndarray) -> int:
        return int(indices[0]) // 10  # batch_size 10, no shuffle

    def event(self, k: int) -> threading.Event:
        with self.lock:
            return self.started.setdefault(k, threading.Event())

    def record(self, what: str, k: int) -> None:
        with self.lock:
            self.log.append((what, k))

    def __len__(self) -> int:
        return len(self.dataset)

    def read(self, indices: np.ndarray) -> tuple[np.ndarray, ...]:
        k = self.batch_of(indices)
        self.record("read started", k)
        self.event(k).set()
        return self.dataset.read(indices)

    def describe(self, indices: np.ndarray) -> str:
        return self.dataset.describe(indices)


# --------------------------------------------------------------------------- the files


def test_shards_round_trip(tmp_path: Path, on_disk: ShardedDataset, arrays) -> None:
    X, y = arrays
    assert len(on_disk) == ROWS and on_disk.names == ["X", "y"]
    assert on_disk.shard_rows == [7] * 7 + [1]
    assert sorted(p.name for p in (tmp_path / "ds").glob("X_*.npy"))[-1] == "X_00007.npy"
    rows = np.array([49, 0, 13, 14, 6, 7])  # across shards, out of order
    got_X, got_y = on_disk.read(rows)
    np.testing.assert_array_equal(got_X, X[rows])
    np.testing.assert_array_equal(got_y, y[rows])
    assert got_X.dtype == np.float32 and got_y.dtype == np.int64
    (only_y,) = ShardedDataset(tmp_path / "ds", names=["y"]).read(np.array([3]))
    assert only_y.tolist() == [30]


def test_bad_paths_name_the_file(tmp_path: Path, on_disk: ShardedDataset) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(DataError, match="nowhere"):
        ShardedDataset(missing)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"empty.*dataset\.json|dataset\.json.*empty"):
        ShardedDataset(tmp_path / "empty")
    (tmp_path / "ds" / "y_00003.npy").unlink()
    with pytest.raises(DataError, match=r"y_00003\.npy"):
        ShardedDataset(tmp_path / "ds")
    with pytest.raises(DataError, match="'z'"):
        ShardedDataset(tmp_path / "ds", names=["z"])
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "dataset.json").write_text("{not json")
    with pytest.raises(DataError, match=r"bad.dataset\.json"):
        ShardedDataset(tmp_path / "bad")


def test_corrupt_shard_names_the_file(tmp_path: Path, on_disk: ShardedDataset) -> None:
    (tmp_path / "ds" / "X_00002.npy").write_bytes(b"not an npy file")
    with pytest.raises(DataError, match=r"X_00002\.npy"):
        on_disk.read(np.array([15]))


def test_write_shards_checks_rows(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"X \(3, 2\).*y \(4,\)"):
        write_shards(tmp_path, X=np.zeros((3, 2)), y=np.zeros(4))


# --------------------------------------------------------------------------- order, len


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("prefetch", [0, 1, 4])
def test_order_without_shuffle(on_disk: ShardedDataset, threads: int, prefetch: int) -> None:
    loader = DataLoader(on_disk, batch_size=8, prefetch=prefetch, num_threads=threads)
    assert rows_of(loader) == [list(range(s, min(s + 8, ROWS))) for s in range(0, ROWS, 8)]
    for X, y in loader:  # the pairs stay aligned
        np.testing.assert_array_equal(y, X[:, 0].astype(np.int64) * 10)


def test_order_with_shuffle_is_the_seeded_permutation(on_disk: ShardedDataset) -> None:
    expected = np.random.default_rng(7).permutation(ROWS)
    for threads in (1, 4):
        loader = DataLoader(on_disk, 16, shuffle=True, seed=7, prefetch=3, num_threads=threads)
        got = rows_of(loader)
        assert [r for batch in got for r in batch] == expected.tolist()
        assert [len(b) for b in got] == [16, 16, 16, 2]
    serial = DataLoader(on_disk, 16, shuffle=True, seed=7, prefetch=0)
    assert rows_of(serial) == rows_of(DataLoader(on_disk, 16, shuffle=True, seed=7,
                                                 num_threads=3))
    two_epochs = [rows_of(serial), rows_of(serial)]
    assert two_epochs[0] != two_epochs[1], "each epoch draws a new permutation"
    assert sorted(r for b in two_epochs[1] for r in b) == list(range(ROWS))


@pytest.mark.parametrize(("batch_size", "drop_last", "expected"),
                         [(8, False, 7), (8, True, 6), (10, True, 5), (10, False, 5),
                          (64, False, 1), (64, True, 0)])
def test_len_and_drop_last(on_disk: ShardedDataset, batch_size: int, drop_last: bool,
                           expected: int) -> None:
    loader = DataLoader(on_disk, batch_size, drop_last=drop_last, num_threads=2)
    batches = list(loader)
    assert len(loader) == len(batches) == expected
    assert all(len(X) == batch_size for X, _ in batches[:-1])
    if drop_last:
        assert all(len(X) == batch_size for X, _ in batches)


def test_bad_arguments_are_clear(on_disk: ShardedDataset) -> None:
    with pytest.raises(ValueError, match="batch_size"):
        DataLoader(on_disk, 0)
    with pytest.raises(ValueError, match="num_threads"):
        DataLoader(on_disk, 4, num_threads=0)
    with pytest.raises(ValueError, match="prefetch"):
        DataLoader(on_disk, 4, prefetch=-1)


# --------------------------------------------------------------------------- prefetch overlaps


@pytest.mark.timing
def test_prefetch_reads_ahead_while_the_consumer_works(on_disk: ShardedDataset) -> None:
    """Batch k+1's read starts before the consumer has finished batch k."""
    recorder = Recorder(on_disk)
    loader = DataLoader(recorder, batch_size=10, prefetch=2, num_threads=1)
    for k, _ in enumerate(loader):
        if k + 1 < len(loader):
            # The consumer holds batch k and has not asked for more: only a reader thread can
            # start batch k+1 now. Without prefetching this wait would time out.
            assert recorder.event(k + 1).wait(WAIT_S), f"batch {k + 1} was not read ahead"
        recorder.record("consumer done", k)
    log = recorder.log
    for k in range(len(loader) - 1):
        assert log.index(("read started", k + 1)) < log.index(("consumer done", k))


def test_no_prefetch_reads_only_on_demand(on_disk: ShardedDataset) -> None:
    recorder = Recorder(on_disk)
    loader = DataLoader(recorder, batch_size=10, prefetch=0)
    for k, _ in enumerate(loader):
        assert loader_threads() == []
        recorder.record("consumer done", k)
    log = recorder.log
    expected = [(what, k) for k in range(5) for what in ("read started", "consumer done")]
    assert log == expected


@pytest.mark.timing
def test_prefetch_window_is_bounded(on_disk: ShardedDataset) -> None:
    """With prefetch=2 and an idle consumer, readers stop 2 batches ahead, not at the end."""
    recorder = Recorder(on_disk)
    loader = DataLoader(recorder, batch_size=10, prefetch=2, num_threads=3)
    batches = iter(loader)
    next(batches)  # batch 0 consumed; readers may now hold batches 1 and 2
    assert recorder.event(2).wait(WAIT_S)
    assert not recorder.event(3).wait(0.3)  # would have started by now if unbounded
    batches.close()


# --------------------------------------------------------------------------- shutdown


def test_early_break_stops_the_threads(on_disk: ShardedDataset) -> None:
    loader = DataLoader(SlowReader(on_disk, 0.01), batch_size=2, prefetch=4, num_threads=3)
    for k, _ in enumerate(loader):
        assert loader_threads(), "the reader threads should be running mid-epoch"
        if k == 1:
            break
    gc.collect()  # CPython already collected the iterator on break; other VMs need this
    for thread in threading.enumerate():
        if thread.name.startswith("edu_dl-loader"):
            thread.join(WAIT_S)
    assert loader_threads() == []


def test_close_and_context_manager_stop_the_threads(on_disk: ShardedDataset) -> None:
    with DataLoader(on_disk, batch_size=2, prefetch=2, num_threads=2) as loader:
        kept = iter(loader)  # kept alive: only close() can stop it
        next(kept)
        assert loader_threads()
    assert loader_threads() == []
    assert list(kept) == []  # a closed epoch is over
    epoch = iter(DataLoader(on_disk, batch_size=2, num_threads=2))
    with epoch:
        next(epoch)
    assert loader_threads() == []


def test_garbage_collection_stops_the_threads(on_disk: ShardedDataset) -> None:
    epoch = iter(DataLoader(on_disk, batch_size=2, prefetch=3, num_threads=2))
    next(epoch)
    threads = loader_threads()
    assert threads
    del epoch
    gc.collect()
    for thread in threads:
        thread.join(WAIT_S)
        assert not thread.is_alive()


@pytest.mark.parametrize("prefetch", [0, 2])
def test_reader_error_is_raised_in_the_consumer(tmp_path: Path, on_disk: ShardedDataset,
                                                prefetch: int) -> None:
    """A file that vanishes mid-epoch: earlier batches arrive, then the error names the file."""
    (tmp_path / "ds" / "X_00003.npy").unlink()  # rows 21..27: batch 2 (rows 20..29)
    loader = DataLoader(on_disk, batch_size=10, prefetch=prefetch, num_threads=3)
    seen = []
    with pytest.raises(LoaderError, match=r"batch 2 of 5.*X_00003\.npy") as info:
        for X, _ in loader:
            seen.append(int(X[0, 0]))
    assert seen == [0, 10]
    cause = info.value.__cause__
    assert isinstance(cause, DataError) and "X_00003.npy" in str(cause)
    assert isinstance(cause.__cause__, FileNotFoundError)
    # The original traceback is kept: its innermost frame is where the read failed.
    frames = []
    tb = cause.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    assert "read" in frames
    assert loader_threads() == []


def test_reader_exception_of_any_kind(on_disk: ShardedDataset) -> None:
    class Broken(SlowReader):
        def read(self, indices: np.ndarray) -> tuple[np.ndarray, ...]:
            if 30 in indices:
                raise ZeroDivisionError("bad row")
            return super().read(indices)

    loader = DataLoader(Broken(on_disk, 0.0), batch_size=10, prefetch=4, num_threads=2)
    with pytest.raises(LoaderError, match=r"batch 3 of 5 .*X_00004\.npy.*ZeroDivisionError: bad"):
        list(loader)
    assert loader_threads() == []
    with pytest.raises(LoaderError, match="batch 3 of 5"):  # a new epoch fails the same way
        list(loader)


# --------------------------------------------------------------------------- devices


def test_array_dataset_and_cpu_device(arrays) -> None:
    X, y = arrays
    loader = DataLoader(ArrayDataset(X, y), batch_size=20, device="cpu", num_threads=2)
    batches = list(loader)
    assert [type(b[0]) for b in batches] == [np.ndarray] * 3
    np.testing.assert_array_equal(np.concatenate([b[1] for b in batches]), y)
    with pytest.raises(ValueError, match="same number of rows"):
        ArrayDataset(X, y[:3])


@pytest.mark.parametrize("prefetch", [0, 2], ids=["in_the_consumer", "in_reader_threads"])
def test_device_gpu_hands_every_array_of_every_batch_to_to_device(arrays, prefetch: int,
                                                                    monkeypatch) -> None:
    """test_gpu_device_moves_batches' logic without a GPU: with device='gpu' each array the
    dataset reads goes through backend.to_device(array, 'gpu'), batch by batch, in order."""
    monkeypatch.setattr(edu_dl.backend, "check_device", lambda device: None)
    monkeypatch.setattr(edu_dl.backend, "to_device", lambda a, device: (device, a))
    X, y = arrays
    batches = list(DataLoader(ArrayDataset(X, y), batch_size=20, device="gpu",
                              prefetch=prefetch, num_threads=2))
    assert [device for batch in batches for device, _ in batch] == ["gpu"] * 2 * len(batches)
    np.testing.assert_array_equal(np.concatenate([b[0][1] for b in batches]), X)
    np.testing.assert_array_equal(np.concatenate([b[1][1] for b in batches]), y)


@pytest.mark.gpu
@pytest.mark.skipif(not edu_dl.gpu_status()[0], reason="no CUDA GPU here")
def test_gpu_device_moves_batches(arrays) -> None:
    X, y = arrays
    loader = DataLoader(ArrayDataset(X, y), batch_size=20, device="gpu", num_threads=2)
    batches = list(loader)
    assert all(edu_dl.backend.device_of(b[0]) == "gpu" for b in batches)
    np.testing.assert_array_equal(edu_dl.to_numpy(batches[1][0]), X[20:40])


@pytest.mark.skipif(edu_dl.gpu_status()[0], reason="a GPU is present: nothing to refuse")
def test_missing_gpu_fails_at_construction(arrays) -> None:
    with pytest.raises(edu_dl.backend.DeviceError, match="No GPU"):
        DataLoader(ArrayDataset(*arrays), batch_size=4, device="gpu")
