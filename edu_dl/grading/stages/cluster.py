"""``edu-dl grade --scheduler ADDRESS`` or ``--local-cluster N``: the sandboxes run on Dask workers.

One task per submission. The client (the instructor's machine) does what a local batch does up to
the sandbox: it reads, restores and prepares each submission (its inputs drawn here), and it
judges what comes back with the instructor's parts, which never leave it (nor does the grading
secret: a task carries the inputs drawn from it). A worker only runs the
sandbox (``run.run_sandboxed``) on the bytes its task carries and returns the
``sandbox.Result``, bounded as locally (``--file-size`` MB of output, a 20 kB log). So nothing of
the instructor's source but the restored notebook (hidden tests included, as locally) reaches a
worker, and that goes straight into the sandbox through unlinked files: it never lies in a folder
the worker keeps, and never in one a sandbox sees.

The cluster itself: a Dask scheduler and its workers run whatever code anyone who reaches their
ports sends, so only ``tls://`` (distributed's Security: mutual TLS, every party presents a
certificate signed by the CA) or plain ``tcp://`` on a loopback address is accepted, and the
scheduler and every worker are checked to listen the same way. ``--local-cluster`` uses TLS with
a throwaway in-memory certificate (``Security.temporary``), so no other user of this machine can
use its loopback ports either.

Failures: Dask reruns the tasks of a worker that died on another worker. A notebook that kills its
worker (the sandbox should make that impossible) must not kill them all: with the scheduler's
``allowed-failures`` set to 1, a task is tried on at most two workers, then its future raises
KilledWorker and the submission gets a "worker lost" row. The client keeps no more tasks in
flight than the cluster has threads, so a dying worker holds only the tasks it is running, and
an innocent task queued behind a hostile one is not counted as a suspect.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import logging
import os
import secrets
import shutil
import signal
import socket
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from edu_dl.grading import cost, sandbox
from edu_dl.grading.model import Job, Row, rows_for, safe_file_name
from edu_dl.grading.settings import GRADER_VERSION, Settings
from edu_dl.grading.stages.judge import judge_run
from edu_dl.grading.stages.prepare import Prepared, prepare, submission_bytes
from edu_dl.grading.stages.receive import received
from edu_dl.grading.stages.run import run_sandboxed
from edu_dl.grading.stages.secret import Secret
from edu_dl.grading.stages.speed_rows import speed_rows

ALLOWED_FAILURES = 1  # a task is tried on at most 1 + this many workers that die running it
WORKER_LOST = "worker lost"
Item = tuple[Job, Path]  # a job and its work folder, as batch.grade hands them over
Graded = tuple[Item, bytes | None, list[Row], cost.Cost]  # what came back, and its cost


class ClusterError(ValueError):
    """The cluster cannot be used (unsafe address, unreachable, a worker without a sandbox);
    the message says why and what to do."""


class WorkerUnfit(RuntimeError):
    """Raised on a worker that must not grade (no sandbox, another edu_dl, unsafe address)."""


@dataclass(frozen=True)
class ClusterOptions:
    """Where the sandboxes run: a scheduler's address, or a local cluster of N workers."""

    scheduler: str = ""  # tls://HOST:PORT, or tcp://127.0.0.1:PORT
    local_workers: int = 0  # > 0: start a local cluster of this many one-thread workers
    tls_ca_file: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    timeout_s: float = 30.0  # to reach the scheduler, and for a first worker to be there
    client: Any = None  # an open distributed.Client to use as it is (benchmarks, tests)
    # Appended for each task that came back: (seconds from submit to result, of them in the
    # sandbox as the worker's watchdog timed it). For the benchmark.
    timings: list[tuple[float, float]] | None = None


# --------------------------------------------------------------------------- addresses


def check_address(address: str) -> str:
    """The address to connect to: ``tls://`` as given; ``tcp://`` only to a loopback address
    (returned as the loopback IP it resolved to, so what was checked is what is reached)."""
    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    scheme, host = parts.scheme.lower(), parts.hostname
    try:
        port = parts.port
    except ValueError:
        port = None
    if scheme not in ("tls", "tcp") or not host or port is None:
        raise ClusterError(f"--scheduler {address!r}: expected tls://HOST:PORT (or "
                           "tcp://127.0.0.1:PORT for a cluster on this machine)")
    if scheme == "tls":
        return f"tls://{_host(host)}:{port}"
    loopback = _loopback_ip(host)
    if loopback is None:
        raise ClusterError(
            f"--scheduler {address}: plain tcp:// is refused off the loopback address: anyone "
            "who reaches a Dask scheduler's port can run code on every worker. Use tls:// with "
            "certificates (--tls-ca-file, --tls-cert, --tls-key), or tcp://127.0.0.1 for a "
            "cluster on this machine")
    return f"tcp://{_host(loopback)}:{port}"


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _loopback_ip(host: str) -> str | None:
    """The loopback IP ``host`` names, or None when it resolves to anything else (or nothing)."""
    try:
        ips = {str(info[4][0])
               for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)}
    except OSError:
        return None
    if not ips or not all(ipaddress.ip_address(ip.split("%")[0]).is_loopback for ip in ips):
        return None
    return sorted(ips)[0]


def is_safe_listener(address: str) -> bool:
    """Does a scheduler or worker listening at ``address`` refuse strangers (TLS, or loopback)?"""
    parts = urlsplit(address)
    if parts.scheme == "tls":
        return True
    if parts.scheme != "tcp" or not parts.hostname:
        return False
    try:
        return ipaddress.ip_address(parts.hostname).is_loopback
    except ValueError:
        return _loopback_ip(parts.hostname) is not None


def _security(options: ClusterOptions, address: str) -> Any:
    """distributed's Security for a tls:// address (the files given, else Dask's own
    configuration: distributed.comm.tls.*); None for loopback tcp://."""
    if not address.startswith("tls://"):
        return None
    from distributed.security import Security

    files = {"--tls-ca-file": options.tls_ca_file, "--tls-cert": options.tls_cert,
             "--tls-key": options.tls_key}
    given = {flag: path for flag, path in files.items() if path is not None}
    if given and len(given) < len(files):
        missing = ", ".join(flag for flag in files if flag not in given)
        raise ClusterError(f"tls://: {missing} missing; the three go together")
    for flag, path in given.items():
        if not Path(path).is_file():
            raise ClusterError(f"{flag} {path}: no such file")
    if given:
        return Security(tls_ca_file=str(options.tls_ca_file),
                        tls_client_cert=str(options.tls_cert),
                        tls_client_key=str(options.tls_key), require_encryption=True)
    security = Security(require_encryption=True)  # from the Dask configuration, if any
    if not getattr(security, "tls_ca_file", None) or \
            not getattr(security, "tls_client_cert", None):
        raise ClusterError(f"{address}: no certificates; pass --tls-ca-file, --tls-cert and "
                           "--tls-key (or set distributed.comm.tls.ca-file, .client.cert and "
                           ".client.key in Dask's configuration)")
    return security


# --------------------------------------------------------------------------- connecting


@contextmanager
def connect(options: ClusterOptions, log: Callable[[str], None]) -> Iterator[Any]:
    """A distributed.Client: to the scheduler named, or to a local cluster started here."""
    if options.client is not None:
        yield options.client
        return
    import dask
    from distributed import Client

    # A local cluster's scheduler lives in this process and reads this configuration.
    with dask.config.set({"distributed.scheduler.allowed-failures": ALLOWED_FAILURES}):
        if options.local_workers:
            with local_cluster(options.local_workers) as client:
                log(f"grading on a local Dask cluster of {options.local_workers} workers")
                yield client
            return
        address = check_address(options.scheduler)
        try:
            client = Client(address, security=_security(options, address),
                            timeout=options.timeout_s)
        except (OSError, TimeoutError) as exc:
            raise ClusterError(f"--scheduler {options.scheduler}: no Dask scheduler answered "
                               f"within {options.timeout_s:g} s ({exc})") from None
        with client:
            yield client


@contextmanager
def local_cluster(workers: int) -> Iterator[Any]:
    """A client of a new cluster on this machine: ``workers`` one-thread worker processes, on
    loopback, with TLS from a throwaway in-memory certificate (no other user gets in), their
    scratch space in a private folder of this run (``scratch``)."""
    import dask
    from distributed import Client, LocalCluster
    from distributed.security import Security

    security = Security.temporary()
    spawned: list[Any] = []
    try:
        with scratch() as folder, dask.config.set({"temporary-directory": str(folder)}):
            # Workers started with SIGINT ignored keep ignoring it (Python leaves an ignored
            # SIGINT alone): Ctrl-C at the terminal reaches the grader alone, which closes them
            # in order.
            with sigint_ignored():
                # Their HTTP servers (metrics, task keys) start whatever the dashboard setting:
                # on a free loopback port, not 8787, which another cluster here may hold.
                local = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                     host="127.0.0.1", protocol="tls://", security=security,
                                     dashboard_address="127.0.0.1:0",
                                     # the workers' warnings too: they write to our stderr
                                     silence_logs=logging.ERROR,
                                     worker_dashboard_address="127.0.0.1:0",
                                     local_directory=str(folder))
            with local, Client(local, security=security) as client:
                try:
                    yield client
                finally:  # the workers now running (one dead before has left already)
                    spawned = _worker_processes(local)
    finally:  # Dask kills its workers before their atexit runs: their software mirrors stay
        # A worker still exiting looks alive to the sweep, and would leave its mirror behind.
        _wait_ended(spawned, timeout_s=15.0)
        sandbox.sweep_mirrors()


def _worker_processes(local: Any) -> list[Any]:
    """The processes of a local cluster's workers (each nanny's child), as psutil handles."""
    import psutil

    found = []
    for nanny in list(local.workers.values()):
        if not nanny.pid:  # never started (psutil.Process(None) would be this process)
            continue
        try:
            found.append(psutil.Process(nanny.pid))
        except psutil.Error:  # gone already
            pass
    return found


def _wait_ended(processes: list[Any], timeout_s: float) -> None:
    """Wait, at most ``timeout_s``, until each process has exited (a zombie has: it runs
    nothing more). Never reaps them: multiprocessing, their parent, does."""
    import psutil

    deadline = time.monotonic() + timeout_s
    for process in processes:
        while time.monotonic() < deadline:
            try:
                if process.status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.Error:  # gone, or its pid reused by another (psutil checks)
                break
            time.sleep(0.05)


@contextmanager
def scratch() -> Iterator[Path]:
    """A private folder for a local cluster's scratch space, removed when the block ends.

    Dask's default, ``<temporary folder>/dask-scratch-space``, is one name for every user of
    the machine: one who creates it first owns the folders a root grader's workers then use.
    This one is made afresh (``mkdtemp``: 0700, a name no one could choose before) and checked
    to be ours before any worker starts."""
    folder = Path(tempfile.mkdtemp(prefix="edu-dl-dask-"))
    try:
        st = folder.lstat()
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise ClusterError(f"{folder}: the local cluster's scratch folder is not this "
                               "user's alone (mode 0700)")
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def sigint_ignored() -> Iterator[None]:
    """SIGINT ignored for the block (in the main thread; elsewhere there is none to ignore)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def software_digest() -> str:
    """What a worker must share with the client: the grader's version, the Python, and the
    edu_dl sources (the runner, and the library the notebooks import)."""
    import edu_dl

    return _software_digest(Path(edu_dl.__file__).resolve().parent)


def warm_up(dask_worker: Any = None) -> str:
    """On a worker (``client.run(warm_up)``): what its first task would otherwise pay for, the
    grader's imports and the sandbox probe; returns the sandbox's problem or the digest.

    Unpickling this function imports this module on the worker, and with it everything a task
    runs there (prepare, run, receive, judge, the speed rows): no module named by a string."""
    return sandbox.bwrap_problem() or software_digest()


@functools.cache
def _software_digest(package: Path) -> str:
    h = hashlib.sha256(f"{GRADER_VERSION} {sys.version_info[:2]}".encode())
    for path in sorted(package.rglob("*.py")):
        h.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def worker_unfit(software: str, address: str) -> str:
    """'' when the worker at ``address`` (this process) may grade, else why not."""
    problem = sandbox.bwrap_problem()
    if problem:  # no --no-sandbox on a cluster: a worker's fallback would run as the worker
        return f"no sandbox: {problem}; a cluster grades in bwrap only"
    if software != software_digest():
        return ("another edu_dl than the client's (its code, the grader's version or the "
                "Python differs); install the same on every worker")
    if not is_safe_listener(address):
        return "it listens on plain tcp:// off the loopback address; start it with tls://"
    return ""


def _facts(software: str, dask_worker: Any = None) -> str:
    """On each worker (client.run): why it cannot grade, or ''."""
    return worker_unfit(software, dask_worker.address)


def check_cluster(client: Any, log: Callable[[str], None], timeout_s: float) -> str:
    """Make the scheduler give up on a task after ALLOWED_FAILURES + 1 dead workers; check that
    the scheduler and every worker are safe to use. Returns the software digest tasks carry."""
    def allow(dask_scheduler: Any = None) -> int:  # defined here: pickled by value, so a
        before = dask_scheduler.allowed_failures  # scheduler without edu_dl can run it
        dask_scheduler.allowed_failures = ALLOWED_FAILURES
        return int(before)

    scheduler = client.scheduler_info()["address"]  # where it listens, not how we reached it
    if not is_safe_listener(scheduler):
        raise ClusterError(f"the scheduler listens at {scheduler}: plain tcp:// off the "
                           "loopback address, where anyone can send it code; use tls://")
    before = client.run_on_scheduler(allow)
    if before != ALLOWED_FAILURES:
        log(f"note: set the scheduler's allowed-failures from {before} to {ALLOWED_FAILURES}: "
            "a submission whose worker dies twice is not run again")
    try:
        client.wait_for_workers(1, timeout=timeout_s)
    except TimeoutError:
        raise ClusterError(f"no Dask worker joined {scheduler} within {timeout_s:g} s") from None
    software = software_digest()
    unfit = {address: why for address, why in client.run(_facts, software).items() if why}
    if unfit:
        raise ClusterError("; ".join(f"worker {a}: {why}" for a, why in sorted(unfit.items())))
    threads = sum(client.nthreads().values())
    log(f"grading on {scheduler}: {len(client.nthreads())} workers, {threads} threads")
    return software


def check_workers(options: ClusterOptions, problem: str, log: Callable[[str], None]) -> None:
    """Refuse, before anything is read or written, a cluster that would not grade in bwrap:
    a local one where ``problem`` (this machine's sandbox: its workers are here), or a
    scheduler any of whose workers lacks it (connected once to ask; the batch connects again)."""
    if options.local_workers:
        if problem:
            raise ClusterError(f"no sandbox: {problem}; a cluster grades in bwrap only (the "
                               "--local-cluster workers run here)")
        return
    with connect(options, lambda _: None) as client:
        check_cluster(client, lambda line: log(line) if line.startswith("note:") else None,
                      options.timeout_s)


# --------------------------------------------------------------------------- the tasks


@dataclass(frozen=True)
class Task:
    """What travels to a worker: the sandbox's files as bytes, the limits, what to hide."""

    files: dict[str, bytes]
    settings: Settings
    hide: tuple[str, ...]
    software: str


def run_task(task: Task) -> Any:
    """On a worker: the runner in this machine's sandbox; returns the sandbox.Result."""
    from distributed import get_worker

    worker = get_worker()
    unfit = worker_unfit(task.software, worker.address)
    if unfit:
        raise WorkerUnfit(f"worker {worker.address}: {unfit}")
    # The worker's own folder (spilled task data) stays hidden too, wherever it lies.
    hide = [Path(p) for p in task.hide] + [Path(worker.local_directory)]
    return run_sandboxed(task.files, task.settings, hide)


def grade_on_cluster(options: ClusterOptions, todo: list[Item], out: Path, settings: Settings,
                     hide: list[Path], log: Callable[[str], None], secret: Secret
                     ) -> Generator[Graded, None, None]:
    """(item, the bytes graded, rows, the grader's own cost) for every item, in the order
    results come back.

    The inputs are drawn here from ``secret``, as locally; a task carries them, never it. The
    cost is this process's (reading and preparing the submission, judging what came back), as
    ``grading.cost`` measures it locally; the worker's sandbox time is not in it."""
    import time

    from distributed import as_completed

    with _quiet_when_stopped() as stopped, connect(options, log) as client:
        software = check_cluster(client, log, options.timeout_s)
        hidden = tuple(str(p) for p in hide)
        finished = as_completed()
        running: dict[Any, tuple[Item, bytes | None, Prepared, float, cost.Cost]] = {}
        queue = iter(todo)

        def fill() -> Iterator[Graded]:
            """Submit until every thread has a task (workers may come and go): never more in
            flight, so a dying worker holds no task it was not running."""
            slots = max(1, sum(client.nthreads().values()))
            while len(running) < slots and (item := next(queue, None)) is not None:
                with cost.metered() as preparing:  # no yield inside: one stage, measured alone
                    data = submission_bytes(item[0], settings)
                    try:
                        prepared = prepare(item[0], out, settings, data, secret, boxed=True)
                    except Exception as exc:  # a grader bug must not stop the batch
                        prepared = rows_for(item[0], "grader error",
                                            f"{type(exc).__name__}: {exc}", "bwrap")
                if isinstance(prepared, list):  # nothing to run: these rows say why
                    yield item, data, prepared, preparing
                    continue
                task = Task(prepared.files, settings, hidden, software)
                future = client.submit(run_task, task, pure=False, key=_key(item[0]))
                running[future] = (item, data, prepared, time.perf_counter(), preparing)
                finished.add(future)

        try:
            yield from fill()
            while running:
                future = next(finished)
                item, data, prepared, sent, preparing = running.pop(future)
                yield from fill()  # the next task starts while this one is judged
                with cost.metered() as judging:
                    rows = _finish(future, item[0], prepared, settings, sent, options.timings)
                    cost.checkpoint()  # the parsed result is held now
                    rows += speed_rows(item[0], prepared.notebook, rows, secret, settings,
                                       hide)  # here
                yield item, data, rows, preparing.plus(judging)
        finally:
            if running:  # interrupted (Ctrl-C): what is still running is no grade
                stopped()
                client.cancel(list(running), force=True)


@contextmanager
def _quiet_when_stopped() -> Iterator[Callable[[], None]]:
    """Yields a function that silences distributed's log until the block ends: a batch cut
    short (Ctrl-C) cancels its tasks and closes the cluster, which Dask would report as
    errors (CancelledError, workers killed) that are no news to the person who pressed it."""
    logger = logging.getLogger("distributed")
    level = logger.level

    def stopped() -> None:
        logger.setLevel(logging.CRITICAL + 1)

    try:
        yield stopped
    finally:
        logger.setLevel(level)


def _key(job: Job) -> str:
    """A readable, unique task key: who and what, for the dashboard and the logs."""
    return f"grade-{safe_file_name(job.student)}-{job.exercise.name}-{secrets.token_hex(4)}"


def _finish(future: Any, job: Job, prepared: Prepared, settings: Settings, sent: float,
            timings: list[tuple[float, float]] | None) -> list[Row]:
    """The rows of one task that came back: judged here, or why there is nothing to judge."""
    import time

    from distributed import KilledWorker

    try:
        done = future.result()
    except KilledWorker as exc:
        return rows_for(job, WORKER_LOST, (
            f"the worker grading it died, and so did the next one ({exc.last_worker.address}); "
            "not run again, so that one notebook cannot take down every worker. Look at it, "
            "and grade it with --force to try again"), "bwrap")
    except WorkerUnfit as exc:
        raise ClusterError(str(exc)) from None
    except Exception as exc:
        return rows_for(job, "grader error", f"on a worker: {type(exc).__name__}: {exc}",
                        "bwrap")
    finally:
        future.release()
    if timings is not None:
        timings.append((time.perf_counter() - sent, done.seconds))
    try:
        return judge_run(job, prepared, received(prepared, done, settings), settings)
    except Exception as exc:  # a grader bug must not stop the batch
        return rows_for(job, "grader error", f"{type(exc).__name__}: {exc}", "bwrap")
