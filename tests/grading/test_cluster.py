"""``edu-dl grade --scheduler/--local-cluster``: a real Dask scheduler and workers, each a process
of its own on the loopback address, grade batches whose gradebooks must equal a local run's, row
for row, whether or not a worker is killed in the middle."""

from __future__ import annotations

import csv
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fixtures.hostile import corpus, no_bwrap

from edu_dl.cli import main
from edu_dl.grading import model, sandbox
from edu_dl.grading.settings import Settings
from edu_dl.grading.stages import cluster as C
from edu_dl.grading.term import batch as G

distributed = pytest.importorskip("distributed")

FAST = Settings(timeout_s=15, memory_mb=2048)
GROUP = f"pytest{os.getpid()}-cluster-"  # the workers' sandboxes carry it: none may linger
DASK = str(Path(sys.executable).parent / "dask")
# Deterministic outcomes only (no timeouts, no memory races), so two runs agree row for row.
CASES = ["good", "wrong", "stub", "sys_exit", "corrupt", "empty_folder", "cheat_check"]


@pytest.fixture(autouse=True)
def _own_sandbox_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sandbox.GROUP_VAR, GROUP)


# --------------------------------------------------------------------------- addresses (fast)


@pytest.mark.parametrize("address", ["tcp://192.0.2.1:8786", "tcp://0.0.0.0:8786",
                                     "192.0.2.1:8786", "tcp://no-such-host.invalid:8786"])
def test_plain_tcp_off_the_loopback_address_is_refused(address: str) -> None:
    with pytest.raises(C.ClusterError, match="tls://"):
        C.check_address(address)


def test_loopback_tcp_and_tls_are_accepted() -> None:
    assert C.check_address("tcp://127.0.0.1:8786") == "tcp://127.0.0.1:8786"
    assert C.check_address("tcp://localhost:8786") in ("tcp://127.0.0.1:8786",
                                                         "tcp://[::1]:8786")
    assert C.check_address("tcp://[::1]:8786") == "tcp://[::1]:8786"
    assert C.check_address("tls://grader.example.org:8786") == "tls://grader.example.org:8786"
    for bad in ("ws://127.0.0.1:8786", "tcp://127.0.0.1", "tls://:8786"):
        with pytest.raises(C.ClusterError, match="expected tls://HOST:PORT"):
            C.check_address(bad)
    assert C.is_safe_listener("tls://10.1.2.3:4000")
    assert C.is_safe_listener("tcp://127.0.0.1:4000")
    assert not C.is_safe_listener("tcp://10.1.2.3:4000")
    assert not C.is_safe_listener("tcp://0.0.0.0:4000")


def test_the_command_refuses_plain_tcp_before_grading(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    corpus.build(tmp_path, tmp_path / "escape", ["good"])
    out = tmp_path / "grades"
    argv = ["grade", str(tmp_path / "submissions"), "--source", str(tmp_path / "source"),
            "--out", str(out), "--scheduler", "tcp://192.0.2.1:8786"]
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert "plain tcp:// is refused" in error and "--tls-ca-file" in error
    assert not out.exists()
    assert main([*argv[:-1], "tls://127.0.0.1:1", "--tls-ca-file", str(tmp_path / "ca.pem")]) == 2
    assert "--tls-cert, --tls-key missing" in capsys.readouterr().err


def test_a_worker_without_the_sandbox_or_with_other_software_is_unfit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    digest = C.software_digest()
    assert C.worker_unfit(digest, "tls://10.0.0.2:4000") == ""
    assert "another edu_dl" in C.worker_unfit("0" * 16, "tls://10.0.0.2:4000")
    assert "plain tcp://" in C.worker_unfit(digest, "tcp://10.0.0.2:4000")
    monkeypatch.setattr(sandbox, "bwrap_problem", lambda: "bwrap is not installed")
    assert "no sandbox" in C.worker_unfit(digest, "tls://10.0.0.2:4000")


class _Reached:
    """A client that reached, over loopback, a scheduler that listens everywhere."""

    def scheduler_info(self) -> dict[str, str]:
        return {"address": "tcp://10.1.2.3:8786"}

    def run_on_scheduler(self, fn: Any) -> int:
        raise AssertionError("nothing may be sent to it")


def test_a_scheduler_listening_off_the_loopback_address_is_refused() -> None:
    with pytest.raises(C.ClusterError, match=r"listens at tcp://10\.1\.2\.3:8786"):
        C.check_cluster(_Reached(), print, 1.0)


# --------------------------------------------------------------------------- a real cluster


@dataclass
class Cluster:
    """A scheduler and workers started as `dask scheduler` / `dask worker` processes."""

    address: str
    security: Any
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)  # name -> proc
    flags: list[str] = field(default_factory=list)  # the --tls-* flags of edu-dl grade

    def options(self, **kw: Any) -> C.ClusterOptions:
        files = dict(zip(("tls_ca_file", "tls_cert", "tls_key"), map(Path, self.flags[1::2])))
        return C.ClusterOptions(scheduler=self.address, **files, **kw)

    def client(self) -> Any:
        return distributed.Client(self.address, security=self.security, timeout=30)

    def kill(self, name: str) -> None:
        self.processes[name].send_signal(signal.SIGKILL)
        self.processes[name].wait()


def _tls_files(folder: Path) -> tuple[list[str], Any]:
    """A self-signed certificate for every party (distributed's own, written to files)."""
    made = distributed.security.Security.temporary()
    folder.mkdir(parents=True, exist_ok=True)
    files = {"ca.pem": made.tls_ca_file, "cert.pem": made.tls_client_cert,
             "key.pem": made.tls_client_key}
    for name, text in files.items():
        (folder / name).write_text(text)
        (folder / name).chmod(0o600)
    tls = [str(folder / n) for n in files]
    security = distributed.security.Security(tls_ca_file=tls[0], tls_client_cert=tls[1],
                                             tls_client_key=tls[2], require_encryption=True)
    return tls, security


class _Clusters:
    """Clusters started for a test (or a module), all killed at the end."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.started, self.logs = folder, list[Cluster](), list[Any]()

    def __call__(self, workers: int, tls: bool = False, no_bwrap_for: int = 0) -> Cluster:
        """``no_bwrap_for``: that many of the workers start where bwrap is hidden (root)."""
        env = {**os.environ, "OMP_NUM_THREADS": "1", sandbox.GROUP_VAR: GROUP}
        folder = self.folder / f"cluster{len(self.started)}"
        folder.mkdir(parents=True)
        tls_files, security = _tls_files(folder / "tls") if tls else ([], None)
        flags = [a for flag, path in zip(("--tls-ca-file", "--tls-cert", "--tls-key"),
                                         tls_files) for a in (flag, path)]
        file = folder / "scheduler.json"
        log = open(folder / "dask.log", "wb")  # closed after the processes
        self.logs.append(log)
        proc = subprocess.Popen(
            [DASK, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
             "--scheduler-file", str(file), *(["--protocol", "tls"] if tls else []), *flags],
            env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while not file.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        time.sleep(0.2)  # the file is written whole, but give it a moment
        address = json.loads(file.read_text())["address"]
        found = Cluster(address, security, {"scheduler": proc}, flags)
        self.started.append(found)
        for i in range(workers):
            argv = [DASK, "worker", address, "--nthreads", "1", "--no-nanny", "--no-dashboard",
                    "--name", f"w{i}", "--host", "127.0.0.1", *flags]
            if i < no_bwrap_for:
                argv = no_bwrap.hide_bwrap(argv, folder)
            found.processes[f"w{i}"] = subprocess.Popen(argv, env=env, stdout=log,
                                                        stderr=subprocess.STDOUT)
        with found.client() as client:
            client.wait_for_workers(workers, timeout=120)
        return found

    def close(self) -> None:
        for found in self.started:  # nothing of theirs needs a clean shutdown
            for proc in found.processes.values():
                proc.kill()
                proc.wait()
        for log in self.logs:
            log.close()
        deadline = time.monotonic() + 10  # a killed worker's sandbox dies with it (bwrap's
        while corpus.sandbox_processes(GROUP) and time.monotonic() < deadline:  # die-with-parent)
            time.sleep(0.1)
        assert not corpus.sandbox_processes(GROUP)


@pytest.fixture
def start(tmp_path: Path) -> Iterator[_Clusters]:
    clusters = _Clusters(tmp_path / "clusters")
    yield clusters
    clusters.close()


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Two workers behind TLS, shared by the tests that do not kill any."""
    clusters = _Clusters(tmp_path_factory.mktemp("tls"))
    yield clusters(2, tls=True)
    clusters.close()


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _same_gradebooks(a: Path, b: Path) -> None:
    for name in ("grades.csv", "nbgrader_grades.csv"):
        assert _csv(a / name) == _csv(b / name), name


def _corpus(root: Path, names: list[str], copies: int = 0) -> None:
    corpus.build(root, root / "escape", names)
    for i in range(copies):  # more of the good student: a batch long enough to kill a worker in
        shutil.copytree(root / "submissions" / "good", root / "submissions" / f"good{i}")


def _worker_running(monitor: Any, names: dict[str, str], wanted: str = "") -> str | None:
    """The name of a worker now running a task whose key holds ``wanted``."""
    for address, keys in monitor.processing().items():
        if any(wanted in str(k) for k in keys) and address in names:
            return names[address]
    return None


@pytest.mark.slow
def test_cluster_gradebooks_equal_a_local_run_even_with_a_worker_killed(
        tmp_path: Path, start: _Clusters) -> None:
    _corpus(tmp_path, CASES, copies=2)
    subs, source = tmp_path / "submissions", tmp_path / "source"
    local = G.grade(subs, source, tmp_path / "local", settings=FAST, jobs=2, progress=False,
                    log=lambda s: None)
    found = start(3)
    messages: list[str] = []
    first = G.grade(subs, source, tmp_path / "grades", settings=FAST, progress=False,
                    log=messages.append, cluster=found.options())
    assert first.graded == local.graded == len(CASES) + 2 and first.isolated
    assert any("3 workers, 3 threads" in m for m in messages), messages
    assert any("allowed-failures from 3 to 1" in m for m in messages), messages
    _same_gradebooks(tmp_path / "local", tmp_path / "grades")
    # The grader's own cost is recorded as on a local run: per submission, in its run record.
    assert set(first.costs) == set(local.costs) and len(first.costs) == first.graded
    assert all(spent.cpu_seconds > 0 and spent.peak_mb > 0 for spent, _ in first.costs.values())
    def run_records(out: Path) -> list[Path]:  # a submission refused before it ran has none
        return sorted(p.relative_to(out) for p in (out / ".work").glob("*/*/run.json"))

    records = run_records(tmp_path / "grades")
    assert records and records == run_records(tmp_path / "local")
    assert all("grader" in json.loads((tmp_path / "grades" / p).read_text())
               for p in records), records
    # Idempotent: nothing changed, nothing runs (the cluster is not even asked).
    again = G.grade(subs, source, tmp_path / "grades", settings=FAST, progress=False,
                    log=lambda s: None, cluster=C.ClusterOptions(scheduler="tcp://127.0.0.1:9"))
    assert again.graded == 0

    # The second batch regrades everything; a worker is killed while it grades.
    done: list[model.Summary] = []
    batch = threading.Thread(target=lambda: done.append(G.grade(
        subs, source, tmp_path / "grades", settings=FAST, progress=False, force=True,
        log=lambda s: None, cluster=found.options())))
    with found.client() as monitor:
        names = {a: w["name"] for a, w in monitor.scheduler_info()["workers"].items()}
        batch.start()
        victim, deadline = None, time.monotonic() + 120
        while victim is None and time.monotonic() < deadline and batch.is_alive():
            victim = _worker_running(monitor, names, "grade-")
            time.sleep(0.05)
        assert victim is not None, "no worker ever ran a task"
        time.sleep(1.0)  # well into its sandbox
        found.kill(victim)
        batch.join(timeout=600)
        assert not batch.is_alive()
        assert len(monitor.nthreads()) == 2  # the dead one is gone; its tasks ran elsewhere
    assert done and done[0].graded == len(CASES) + 2
    _same_gradebooks(tmp_path / "local", tmp_path / "grades")
    keys = [(r["student"], r["exercise"], r["part"]) for r in _csv(tmp_path / "grades" /
                                                                  "grades.csv")]
    assert len(keys) == len(set(keys))  # no row written twice


@pytest.mark.slow
def test_a_submission_whose_worker_dies_twice_gets_a_worker_lost_row(
        tmp_path: Path, start: _Clusters) -> None:
    _corpus(tmp_path, ["good", "wrong"])
    # Its notebook runs for seconds, so its worker dies while running it (a trivial notebook
    # is graded in a fraction of a second).
    killer = corpus.student()
    corpus._prepend("gflops", "import time\ntime.sleep(10)")(killer)
    corpus.write(tmp_path / "submissions" / "killer", killer)
    found = start(3)
    killed: list[str] = []
    done: list[model.Summary] = []
    batch = threading.Thread(target=lambda: done.append(G.grade(
        tmp_path / "submissions", tmp_path / "source", tmp_path / "grades", settings=FAST,
        progress=False, log=lambda s: None, cluster=found.options())))
    with found.client() as monitor:
        names = {a: w["name"] for a, w in monitor.scheduler_info()["workers"].items()}
        batch.start()
        # Whichever worker runs the killer's task dies, as if the notebook had killed it.
        while batch.is_alive() and len(killed) < 3:
            victim = _worker_running(monitor, names, "grade-killer-")
            if victim is not None and victim not in killed:
                time.sleep(0.5)
                found.kill(victim)
                killed.append(victim)
            time.sleep(0.05)
        batch.join(timeout=600)
    assert len(killed) == 2, killed  # not a third: the task is not run again
    assert done and done[0].graded == 3
    got = {(r.student, r.part): r for r in done[0].rows}
    for part in corpus.PARTS:
        lost = got[("killer", part)]
        assert (lost.status, lost.points) == (C.WORKER_LOST, 0.0), lost
        assert "not run again" in lost.message
    assert got[("good", "ex02.gflops")].status == "passed"
    assert got[("wrong", "ex02.gflops")].status == "failed"
    assert got[("wrong", "ex02.peak_bandwidth")].status == "passed"


@pytest.mark.slow
def test_a_tls_cluster_grades_and_refuses_a_stranger(
        tmp_path: Path, tls_cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    _corpus(tmp_path, ["good", "wrong"])
    found = tls_cluster
    assert found.address.startswith("tls://127.0.0.1:")
    argv = ["grade", str(tmp_path / "submissions"), "--source", str(tmp_path / "source"),
            "--out", str(tmp_path / "grades"), "--timeout", "15", "--memory", "2048"]
    assert main([*argv, "--scheduler", found.address, *found.flags]) == 0
    assert "graded 2 submissions" in capsys.readouterr().out
    got = {(r["student"], r["part"]): r["status"] for r in _csv(tmp_path / "grades" /
                                                                "grades.csv")}
    assert got[("good", "ex02.gflops")] == "passed" and got[("wrong", "ex02.gflops")] == "failed"
    # Without certificates, or with a certificate the cluster's CA did not sign: no way in.
    assert main([*argv, "--force", "--scheduler", found.address]) == 2
    assert "no certificates" in capsys.readouterr().err
    stranger, _ = _tls_files(tmp_path / "stranger")
    options = C.ClusterOptions(scheduler=found.address, tls_ca_file=Path(stranger[0]),
                               tls_cert=Path(stranger[1]), tls_key=Path(stranger[2]),
                               timeout_s=5)
    with pytest.raises(C.ClusterError, match="no Dask scheduler answered"):
        G.grade(tmp_path / "submissions", tmp_path / "source", tmp_path / "grades",
                settings=FAST, progress=False, force=True, log=lambda s: None,
                cluster=options)


class _Recording:
    """A distributed.Client that keeps what each task carries to a worker."""

    def __init__(self, client: Any) -> None:
        self.client, self.sent = client, []  # type: ignore[var-annotated]

    def submit(self, fn: Any, *args: Any, **kw: Any) -> Any:
        self.sent.append(pickle.dumps(args))
        return self.client.submit(fn, *args, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


@pytest.mark.slow
def test_the_private_source_never_travels_to_a_worker(tmp_path: Path,
                                                     tls_cluster: Cluster) -> None:
    import nbformat
    from test_instructor_course import CHEAT, _private_course

    from edu_dl.grading import nbgrader
    from edu_dl.grading import notebooks as nbs

    src = _private_course(tmp_path / "course")
    nb = nbs.read_notebook(src / "hw2.ipynb")
    next(c for c in nb.cells if nbgrader.grade_id(c) == "squares").source = CHEAT
    folder = tmp_path / "course" / "submitted" / "cheat" / "hw2"
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / "hw2.ipynb")
    with tls_cluster.client() as client:
        recording = _Recording(client)
        summary = G.grade(tmp_path / "course", src, tmp_path / "grades", settings=FAST,
                          progress=False, log=lambda s: None,
                          cluster=C.ClusterOptions(client=recording))
    assert [(r.part, r.status) for r in summary.rows] == [("hw2.squares", "failed")]
    assert len(recording.sent) == 1
    sent = recording.sent[0]
    assert b"check(\\\"hw2.squares\\\", squares, hidden=True)" in sent or \
        b"hidden=True" in sent  # the hidden tests do reach the sandbox, as locally
    assert b"PRIVATE_PART_FILE" not in sent and b"expected=lambda" not in sent
    assert b"i * i for i in range" not in sent  # the solution stays with the instructor
    assert b"figure.png" in sent  # what lies beside the notebook travels with the task


def _mirrors() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob(f"{sandbox.MIRROR_PREFIX}*"))


def _owner_pid(mirror: Path) -> int | None:
    """The pid a mirror's name holds (pid.start time); None for an unnamed one."""
    pid = mirror.name[len(sandbox.MIRROR_PREFIX):].split("-", 1)[0].split(".")[0]
    return int(pid) if pid.isdigit() else None


def test_a_nanny_without_a_process_is_not_waited_for() -> None:
    """A worker never started (its nanny's pid None) is skipped: psutil.Process(None) would be
    the grader itself, waited for until the timeout; a live worker is kept, a gone one not."""
    from types import SimpleNamespace

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    local = SimpleNamespace(workers={0: SimpleNamespace(pid=None),
                                     1: SimpleNamespace(pid=int(gone.stdout)),
                                     2: SimpleNamespace(pid=os.getppid())})
    assert [p.pid for p in C._worker_processes(local)] == [os.getppid()]


@pytest.mark.slow
def test_local_cluster_option(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                              monkeypatch: pytest.MonkeyPatch) -> None:
    _corpus(tmp_path, ["good", "stub"])
    argv = ["grade", str(tmp_path / "submissions"), "--source", str(tmp_path / "source"),
            "--out", str(tmp_path / "grades"), "--timeout", "15", "--memory", "2048",
            "--local-cluster", "1"]
    ours: list[int] = []
    found = C._worker_processes

    def recorded(local: Any) -> list[Any]:
        processes = found(local)
        ours.extend(p.pid for p in processes)
        return processes

    monkeypatch.setattr(C, "_worker_processes", recorded)
    assert main(argv) == 0
    # The workers' software mirrors (made where the sandbox's uid cannot reach the Python, as
    # root) are gone with them. Another test's grader may meanwhile leave its own: only the
    # mirrors of this cluster's workers count.
    assert len(ours) == 1
    assert not [m for m in _mirrors() if _owner_pid(m) in ours]
    assert "graded 2 submissions" in capsys.readouterr().out
    got = {(r["student"], r["part"]): r["status"] for r in _csv(tmp_path / "grades" /
                                                                "grades.csv")}
    assert got[("good", "ex02.gflops")] == "passed"
    assert got[("stub", "ex02.gflops")] == "not implemented"
    assert main([*argv[:-1], "0"]) == 2


def test_the_scratch_folder_must_be_ours_alone(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder another user could enter (here: one made 0755, as if pre-created) is refused
    before any worker starts."""
    shared = tmp_path / "pre-created"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    monkeypatch.setattr(C.tempfile, "mkdtemp", lambda prefix="": str(shared))
    with pytest.raises(C.ClusterError, match="not this user's alone"), C.scratch():
        pass
    assert not shared.exists()  # removed all the same


@pytest.mark.slow
def test_a_local_cluster_scratch_space_is_private_and_removed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Dask's default scratch space, <temporary folder>/dask-scratch-space, may be made first by
    another user (here, as root: one owned by nobody, open to all), who could then swap the
    workers' folders. --local-cluster's workers use a private folder of their own instead, and
    it is gone when the cluster is."""
    shared = tmp_path / "tmp"  # the machine's temporary folder, as others see it
    shared.mkdir()
    shared.chmod(0o1777)
    planted = shared / "dask-scratch-space"
    planted.mkdir()
    planted.chmod(0o777)
    if os.geteuid() == 0:
        os.chown(planted, 65534, 65534)
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    with C.local_cluster(1) as client:
        folders = list(client.run(lambda dask_worker: dask_worker.local_directory).values())
        scratch = {Path(f).relative_to(shared).parts[0] for f in folders}
        assert len(scratch) == 1 and scratch != {planted.name}, folders
        mine = shared / scratch.pop()
        st = mine.lstat()
        assert st.st_uid == os.geteuid() and st.st_mode & 0o777 == 0o700
    assert not mine.exists()
    assert list(planted.iterdir()) == []  # nothing of the cluster's went to the planted folder


@pytest.mark.slow
@pytest.mark.root_only
def test_a_worker_without_bwrap_is_refused_before_anything_is_written(
        tmp_path: Path, start: _Clusters, capsys: pytest.CaptureFixture[str]) -> None:
    """One worker started where bwrap is hidden (a private mount namespace): the batch refuses
    with exit status 2, naming the worker and the fix, and writes nothing."""
    if no_bwrap.available():
        pytest.fail(no_bwrap.available())
    found = start(2, no_bwrap_for=1)
    _corpus(tmp_path, ["good"])
    out = tmp_path / "grades"
    assert main(["grade", str(tmp_path / "submissions"), "--source", str(tmp_path / "source"),
                 "--out", str(out), "--scheduler", found.address]) == 2
    err = capsys.readouterr().err
    assert "no sandbox: bubblewrap (bwrap) is not installed" in err, err
    assert "apt-get install bubblewrap" in err and "a cluster grades in bwrap only" in err
    assert not out.exists()
