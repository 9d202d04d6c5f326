"""Feeding the model: a data loader that reads batches from disk while the model computes.

A GPU can finish a training step faster than a disk delivers the next batch, so the loader reads
ahead in background threads: while the consumer works on batch k, readers fetch k+1, k+2, ...
Epoch time drops from n * (read + compute) to about n * max(read / threads, compute).

- ``write_shards(directory, X=..., y=...)`` stores arrays as one ``.npy`` file per array and shard,
  plus ``dataset.json``; ``ShardedDataset(directory)`` reads any rows back (memory-mapped).
- ``ArrayDataset(X, y)`` serves arrays already in memory; ``SlowReader(dataset, delay_s)`` sleeps
  per batch to play a slow disk.
- ``DataLoader(dataset, batch_size, prefetch=2, num_threads=1, shuffle=..., seed=..., drop_last=...,
  device=...)`` yields tuples of arrays, in order, and stops its threads on early ``break``, on
  garbage collection, on ``close()`` / ``with``, and when a reader fails (the error is re-raised in
  the consumer, naming the batch and the file).
"""

from __future__ import annotations

import json
import math
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

import numpy as np

Batch = tuple[Any, ...]
INDEX_FILE = "dataset.json"
# How long close() waits for a reader thread; a reader blocked inside a slow read is a daemon
# thread, so it can never keep the interpreter alive.
JOIN_TIMEOUT_S = 5.0


class DataError(RuntimeError):
    """A dataset on disk is missing, malformed, or could not be read."""


class LoaderError(RuntimeError):
    """A reader thread failed; ``__cause__`` is the original exception with its traceback."""


class Dataset(Protocol):
    """What the loader needs: a number of rows and a way to read any rows of them."""

    def __len__(self) -> int: ...

    def read(self, indices: np.ndarray) -> Batch:
        """The rows ``indices`` of every array, as a tuple of arrays."""
        ...

    def describe(self, indices: np.ndarray) -> str:
        """Where those rows live (the files), for error messages."""
        ...


# --------------------------------------------------------------------------- datasets


class ArrayDataset:
    """Arrays already in memory, sharing their first axis (rows)."""

    def __init__(self, *arrays: Any) -> None:
        if not arrays:
            raise ValueError("ArrayDataset needs at least one array")
        rows = {len(a) for a in arrays}
        if len(rows) != 1:
            shapes = ", ".join(str(np.shape(a)) for a in arrays)
            raise ValueError(f"ArrayDataset: arrays must have the same number of rows, "
                             f"got {shapes}")
        self.arrays = tuple(np.asarray(a) for a in arrays)

    def __len__(self) -> int:
        return len(self.arrays[0])

    def read(self, indices: np.ndarray) -> Batch:
        return tuple(a[indices] for a in self.arrays)

    def describe(self, indices: np.ndarray) -> str:
        return "arrays in memory"


def write_shards(directory: str | Path, shard_rows: int = 1024, **arrays: Any) -> Path:
    """Write arrays (same number of rows) as ``<name>_<shard>.npy`` files plus ``dataset.json``.

    ``write_shards("data", X=X, y=y)`` makes data/X_00000.npy, data/y_00000.npy, ...
    """
    if not arrays:
        raise ValueError("write_shards: give at least one array, e.g. write_shards(dir, X=X)")
    if shard_rows < 1:
        raise ValueError(f"write_shards: shard_rows must be at least 1, got {shard_rows}")
    values = {name: np.asarray(a) for name, a in arrays.items()}
    rows = {len(a) for a in values.values()}
    if len(rows) != 1:
        shapes = ", ".join(f"{name} {a.shape}" for name, a in values.items())
        raise ValueError(f"write_shards: arrays must have the same number of rows, got {shapes}")
    n = rows.pop()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    sizes = []
    for shard, start in enumerate(range(0, n, shard_rows)):
        for name, a in values.items():
            np.save(directory / _shard_name(name, shard), a[start:start + shard_rows])
        sizes.append(min(shard_rows, n - start))
    index = {
        "names": list(values),
        "shard_rows": sizes,
        "dtypes": {name: str(a.dtype) for name, a in values.items()},
        "shapes": {name: list(a.shape[1:]) for name, a in values.items()},
    }
    (directory / INDEX_FILE).write_text(json.dumps(index, indent=1), encoding="utf-8")
    return directory


def _shard_name(name: str, shard: int) -> str:
    return f"{name}_{shard:05d}.npy"


class ShardedDataset:
    """A dataset written by ``write_shards``: rows are read from the shard files on demand."""

    def __init__(self, directory: str | Path, names: Sequence[str] | None = None) -> None:
        self.directory = Path(directory)
        index_path = self.directory / INDEX_FILE
        if not self.directory.is_dir():
            raise DataError(f"dataset directory not found: {self.directory}")
        try:
            index = json.loads(index_path.read_text(encoding="utf-8"))
            stored = list(index["names"])
            self.shard_rows = [int(r) for r in index["shard_rows"]]
        except FileNotFoundError:
            raise DataError(f"{index_path} not found: is {self.directory} a dataset written by "
                            "edu_dl.data.write_shards?") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise DataError(f"{index_path} is not a valid dataset index: {exc}") from exc
        self.names = list(names) if names is not None else stored
        unknown = [name for name in self.names if name not in stored]
        if unknown:
            raise DataError(f"{index_path}: no array named {', '.join(map(repr, unknown))} "
                            f"(stored: {', '.join(stored)})")
        for shard in range(len(self.shard_rows)):  # a missing file is an error now, not later
            for name in self.names:
                path = self.directory / _shard_name(name, shard)
                if not path.is_file():
                    raise DataError(f"dataset file missing: {path} (listed in {index_path})")
        # Row r lives in shard searchsorted(starts, r, 'right') - 1.
        self.starts = np.concatenate([[0], np.cumsum(self.shard_rows)]).astype(np.int64)

    def __len__(self) -> int:
        return int(self.starts[-1])

    def _shards_of(self, indices: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.starts, indices, side="right") - 1

    def path(self, name: str, shard: int) -> Path:
        return self.directory / _shard_name(name, shard)

    def read(self, indices: np.ndarray) -> Batch:
        """Rows ``indices`` (any order, any shards) of every array, copied into memory."""
        indices = np.asarray(indices, dtype=np.int64)
        if len(indices) and (indices.min() < 0 or indices.max() >= len(self)):
            raise IndexError(f"rows out of range for {self.directory} ({len(self)} rows)")
        shards = self._shards_of(indices)
        out: list[np.ndarray] = []
        for name in self.names:
            parts: np.ndarray | None = None
            for shard in np.unique(shards):
                where = shards == shard
                path = self.path(name, int(shard))
                try:
                    # A memory map reads only the rows asked for, as a disk-backed loader should.
                    stored = np.load(path, mmap_mode="r")
                    rows = np.asarray(stored[indices[where] - self.starts[shard]])
                except (OSError, ValueError) as exc:
                    raise DataError(f"cannot read {path}: {exc}") from exc
                if parts is None:
                    parts = np.empty((len(indices), *rows.shape[1:]), dtype=rows.dtype)
                parts[where] = rows
            if parts is None:  # no rows asked for
                parts = np.load(self.path(name, 0), mmap_mode="r")[:0].copy()
            out.append(parts)
        return tuple(out)

    def describe(self, indices: np.ndarray) -> str:
        shards = np.unique(self._shards_of(np.asarray(indices, dtype=np.int64)))
        files = [str(self.path(name, int(s))) for s in shards for name in self.names]
        shown = ", ".join(files[:4]) + (f" and {len(files) - 4} more" if len(files) > 4 else "")
        return f"files {shown}"


class SlowReader:
    """A dataset that sleeps ``delay_s`` seconds per read: a slow disk, on purpose."""

    def __init__(self, dataset: Dataset, delay_s: float) -> None:
        if delay_s < 0:
            raise ValueError(f"SlowReader: delay_s must be >= 0, got {delay_s}")
        self.dataset, self.delay_s = dataset, delay_s

    def __len__(self) -> int:
        return len(self.dataset)

    def read(self, indices: np.ndarray) -> Batch:
        time.sleep(self.delay_s)  # sleeps release the GIL, as real disk reads do
        return self.dataset.read(indices)

    def describe(self, indices: np.ndarray) -> str:
        return self.dataset.describe(indices)


# --------------------------------------------------------------------------- the loader


class DataLoader:
    """Batches of a Dataset, read ahead by ``num_threads`` threads, at most ``prefetch`` ahead.

    ``prefetch=0`` reads each batch only when asked for (no threads): the baseline the
    prefetching loader is measured against. Batches always come in order; with ``shuffle`` the
    rows are permuted per epoch by ``np.random.default_rng(seed)`` (epoch e uses the generator's
    e-th permutation, so a seeded loader repeats its sequence of epochs).
    """

    def __init__(
        self,
        dataset: Dataset,
        batch_size: int,
        *,
        shuffle: bool = False,
        seed: int | None = None,
        drop_last: bool = False,
        prefetch: int = 2,
        num_threads: int = 1,
        device: str | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"DataLoader: batch_size must be at least 1, got {batch_size}")
        if prefetch < 0:
            raise ValueError(f"DataLoader: prefetch must be >= 0, got {prefetch}")
        if num_threads < 1:
            raise ValueError(f"DataLoader: num_threads must be at least 1, got {num_threads}")
        if device is not None:
            from edu_dl.backend import check_device

            check_device(device)  # asking for a missing GPU fails here, not in a thread
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.prefetch = prefetch
        self.num_threads = num_threads
        self.device = device
        self._rng = np.random.default_rng(seed)
        self._epochs: weakref.WeakSet[_Epoch] = weakref.WeakSet()

    def __len__(self) -> int:
        """Batches per epoch: floor(rows / batch_size) with drop_last, else ceil."""
        rows = len(self.dataset)
        return rows // self.batch_size if self.drop_last else math.ceil(rows / self.batch_size)

    def batch_indices(self) -> list[np.ndarray]:
        """The row indices of every batch of the next epoch (draws the shuffle)."""
        rows = len(self.dataset)
        order = self._rng.permutation(rows) if self.shuffle else np.arange(rows)
        return [order[k * self.batch_size:(k + 1) * self.batch_size] for k in range(len(self))]

    def __iter__(self) -> _Epoch:
        epoch = _Epoch(self.dataset, self.batch_indices(), self.prefetch, self.num_threads,
                       self.device)
        self._epochs.add(epoch)
        return epoch

    def close(self) -> None:
        """Stop the reader threads of every epoch still running."""
        for epoch in list(self._epochs):
            epoch.close()

    def __enter__(self) -> DataLoader:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


@dataclass
class _Failure:
    """A reader's exception, delivered to the consumer in place of batch ``index``."""

    index: int
    error: BaseException
    where: str


@dataclass
class _State:
    """What the reader threads share with the consumer, guarded by ``cond``.

    The threads hold this, never the _Epoch, so dropping the iterator garbage-collects it.
    """

    batches: list[np.ndarray]
    prefetch: int
    cond: threading.Condition = field(default_factory=threading.Condition)
    taken: int = 0  # batches handed to readers so far (next one to read)
    consumed: int = 0  # batches handed to the consumer so far
    ready: dict[int, Batch | _Failure] = field(default_factory=dict)
    stop: bool = False  # readers take no new batch (after a failure, or once closed)
    closed: bool = False  # the epoch is over: nothing more is delivered


def _reader(state: _State, dataset: Dataset, device: str | None) -> None:
    """Take the next batch number, read it, publish it; never more than ``prefetch`` ahead."""
    cond = state.cond
    while True:
        with cond:
            # Taking numbers in order while the window is full keeps the batches in flight a
            # contiguous range starting at the consumer's next: so no reader waits on a slot
            # held by a later batch (no deadlock), and the window bounds the memory used.
            while not state.stop and state.taken - state.consumed >= state.prefetch:
                cond.wait()
            if state.stop or state.taken >= len(state.batches):
                return
            k = state.taken
            state.taken += 1
        indices = state.batches[k]
        item: Batch | _Failure
        try:
            item = dataset.read(indices)
            if device is not None:
                from edu_dl.backend import to_device

                item = tuple(to_device(a, device) for a in item)
        except BaseException as exc:  # delivered to the consumer, raised there
            item = _Failure(k, exc, _describe(dataset, indices))
        with cond:
            if isinstance(item, _Failure):
                state.stop = True  # read nothing more; batches before k still arrive
            if not state.closed:
                state.ready[k] = item
            cond.notify_all()


def _describe(dataset: Dataset, indices: np.ndarray) -> str:
    try:
        return dataset.describe(indices)
    except Exception:
        return type(dataset).__name__


def _shutdown(state: _State, threads: list[threading.Thread]) -> None:
    with state.cond:
        state.stop = state.closed = True
        state.ready.clear()  # free the prefetched batches now
        state.cond.notify_all()
    for thread in threads:
        if thread is not threading.current_thread():
            thread.join(JOIN_TIMEOUT_S)


class _Epoch(Iterator[Batch]):
    """One pass over the batches; its reader threads stop when it ends, closes or is collected."""

    def __init__(self, dataset: Dataset, batches: list[np.ndarray], prefetch: int,
                 num_threads: int, device: str | None) -> None:
        self.dataset, self.device = dataset, device
        self.size = len(batches)
        self.next_index = 0
        self.closed = False
        self._state = _State(batches, prefetch)
        self._threads: list[threading.Thread] = []
        if prefetch > 0:
            for i in range(min(num_threads, self.size)):
                thread = threading.Thread(target=_reader, args=(self._state, dataset, device),
                                          name=f"edu_dl-loader-{i}", daemon=True)
                self._threads.append(thread)
        # Runs on close(), or when the iterator is garbage-collected (early break, del).
        self._finalizer = weakref.finalize(self, _shutdown, self._state, self._threads)
        for thread in self._threads:
            thread.start()

    def __len__(self) -> int:
        return self.size

    def __next__(self) -> Batch:
        if self.closed or self.next_index >= self.size:
            self.close()
            raise StopIteration
        k = self.next_index
        state = self._state
        if not self._threads:  # prefetch=0: read now, in the consumer's thread
            indices = state.batches[k]
            try:
                batch = self.dataset.read(indices)
                if self.device is not None:
                    from edu_dl.backend import to_device

                    batch = tuple(to_device(a, self.device) for a in batch)
            except Exception as exc:
                self.close()
                raise LoaderError(self._message(_Failure(k, exc, _describe(self.dataset,
                                                                           indices)))) from exc
            self.next_index += 1
            return batch
        with state.cond:
            while k not in state.ready:
                if state.closed:  # closed from elsewhere (DataLoader.close) while we waited
                    self.closed = True
                    raise StopIteration
                state.cond.wait()
            item = state.ready.pop(k)
            state.consumed += 1
            state.cond.notify_all()  # a slot in the window is free again
        self.next_index += 1
        if isinstance(item, _Failure):
            self.close()
            raise LoaderError(self._message(item)) from item.error
        return item

    def _message(self, failure: _Failure) -> str:
        error = failure.error
        return (f"reading batch {failure.index} of {self.size} ({failure.where}) failed: "
                f"{type(error).__name__}: {error}")

    def close(self) -> None:
        """Stop and join the reader threads; later next() calls raise StopIteration."""
        self.closed = True
        self._finalizer()

    def __enter__(self) -> _Epoch:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
