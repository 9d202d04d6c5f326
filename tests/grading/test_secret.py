"""Same answer, same grade, replayable (issue 23): the hidden inputs come from one secret per
gradebook, so identical notebooks get identical grades on every run, ``--force`` and a cluster
included; ``edu-dl replay`` judges a stored run again, row for row; validate never needs the
instructor's secret and gives the same answer twice."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import pytest
from fixtures.nbgrader_course import _code

from edu_dl.grading import nbgrader, sandbox
from edu_dl.grading import notebooks as nbs
from edu_dl.grading.settings import Settings
from edu_dl.grading.stages import secret as S
from edu_dl.grading.stages.replay import Replay
from edu_dl.grading.term import batch as G
from edu_dl.grading.term import db, gradebook

FAST = Settings(timeout_s=30, memory_mb=2048)
STUDENTS = [f"s{i}" for i in range(8)]

PARTS = '''
import numpy as np
from edu_dl.grading import Part

PARTS = [
    Part(id="hw5.squares", points=2,
         cases=lambda rng, hidden: [(3,)] if not hidden else [(int(rng.integers(4, 9)),)],
         expected=lambda n: np.arange(1, n + 1) ** 2),
    Part(id="hw5.double", points=1,
         cases=lambda rng, hidden: [(np.ones(2),)] if not hidden else [(rng.standard_normal(4),)],
         expected=lambda x: 2 * x),
]
'''
# Right on the visible case (n = 3), wrong on an even n: whether a hidden case catches it
# depends on the inputs drawn (n in 4..8: even 3 times in 5).
FLAWED = ("def squares(n):\n    return [i * i for i in range(1, n + 1)] if n % 2 else [0] * n\n\n"
          "def double(x):\n    return 2 * x")


@pytest.fixture(autouse=True)
def _own_sandbox_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sandbox.GROUP_VAR, f"pytest{os.getpid()}-")


def _course(root: Path, students: list[str] = STUDENTS) -> tuple[Path, Path]:
    """source/hw5 (a private exercise: hidden random cases) and eight byte-identical
    submissions with an input-dependent flaw."""
    src = root / "source" / "hw5"
    (src / "parts").mkdir(parents=True)
    (src / "parts" / "hw5.py").write_text(PARTS)
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        _code("from edu_dl.grading import check", gid="setup", locked=True),
        _code("def squares(n):\n    ### BEGIN SOLUTION\n"
              "    return [i * i for i in range(1, n + 1)]\n    ### END SOLUTION\n\n"
              "def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION",
              gid="squares", solution=True),
        _code('check("hw5.squares", squares)\n### BEGIN HIDDEN TESTS\n'
              'check("hw5.squares", squares, hidden=True)\n### END HIDDEN TESTS',
              gid="squares_tests", grade=True, locked=True, points=2),
        _code('check("hw5.double", double)\n### BEGIN HIDDEN TESTS\n'
              'check("hw5.double", double, hidden=True)\n### END HIDDEN TESTS',
              gid="double_tests", grade=True, locked=True, points=1),
    ]
    nbformat.write(nb, src / "hw5.ipynb")
    submitted = nbs.read_notebook(src / "hw5.ipynb")
    next(c for c in submitted.cells if nbgrader.grade_id(c) == "squares").source = FLAWED
    subs = root / "submissions"
    for student in students:
        (subs / student).mkdir(parents=True)
        nbformat.write(submitted, subs / student / "hw5.ipynb")
    data = {(subs / s / "hw5.ipynb").read_bytes() for s in students}
    assert len(data) == 1  # byte-identical
    return subs, src


def _hidden_n(secret: S.Secret) -> int:
    """The n the hidden case of hw5.squares gets from ``secret`` (as the part file draws it)."""
    namespace: dict[str, Any] = {}
    exec(PARTS, namespace)
    part = namespace["PARTS"][0]
    rng = np.random.default_rng(secret.seed("hw5", "hw5.squares"))
    part.cases(rng, False)
    return int(part.cases(rng, True)[0][0])


def _secrets() -> tuple[S.Secret, S.Secret]:
    """Two fixed secrets: one draws an even n (the flaw fails), the other an odd n (passes)."""
    found: dict[bool, S.Secret] = {}
    for i in range(100):
        secret = S.Secret(bytes([i]) * 32)
        found.setdefault(_hidden_n(secret) % 2 == 0, secret)
    return found[True], found[False]


def _write_secret(out: Path, secret: S.Secret) -> None:
    out.mkdir(parents=True, exist_ok=True)
    fd = os.open(out / S.FILE_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, secret.key.hex().encode())
    os.close(fd)


def _grades(summary: Any) -> dict[str, tuple[float, str]]:
    return {r.student: (r.points, r.status) for r in summary.rows if r.part == "hw5.squares"}


# --------------------------------------------------------------------------- the secret file


def replay(out: Path, student: str, exercise: str, source: Path, **given: Any) -> Replay:
    """The stored run judged again, compared with the rows the gradebook holds (as edu-dl
    replay does)."""
    from edu_dl.grading.stages.replay import replay as judged_again

    kept = gradebook.kept_entry(out, student, exercise)
    return judged_again(out, student, exercise, source, kept=kept.rows if kept else None,
                        **given)


def test_the_secret_file_is_owner_only_made_once_and_never_a_link(tmp_path: Path) -> None:
    path = tmp_path / "grades" / S.FILE_NAME
    old = os.umask(0)  # even with a permissive umask
    try:
        secret, created = S.load_or_create(path)
    finally:
        os.umask(old)
    assert created and len(secret.key) == S.SECRET_BYTES
    assert path.stat().st_mode & 0o777 == 0o600
    assert S.load_or_create(path) == (secret, False)  # kept: the same secret every run
    assert secret.key.hex() not in repr(secret)  # never shown in a log or traceback
    # A link at the secret's path is refused, read or rotated, wherever it points.
    target = tmp_path / "elsewhere"
    target.write_text(secret.key.hex())
    link = tmp_path / "linked" / S.FILE_NAME
    link.parent.mkdir()
    link.symlink_to(target)
    for attempt in (S.load_or_create, S.read_secret, S.rotate):
        with pytest.raises(S.SecretError, match="symbolic link"):
            attempt(link)
    dangling = tmp_path / "dangling" / S.FILE_NAME
    dangling.parent.mkdir()
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(S.SecretError, match="symbolic link"):
        S.load_or_create(dangling)
    assert not (tmp_path / "nowhere").exists()  # never created through the link
    (tmp_path / "junk").write_text("not hex")
    (tmp_path / "junk").chmod(0o600)
    with pytest.raises(S.SecretError, match="not a grading secret"):
        S.read_secret(tmp_path / "junk")
    # A secret every user could read (or anyone but the owner change) is refused, not used.
    for mode, ok in ((0o644, False), (0o602, False), (0o620, False), (0o640, True)):
        path.chmod(mode)
        if ok:
            assert S.read_secret(path) == secret
        else:
            with pytest.raises(S.SecretError, match=f"mode {mode:o}.*chmod 600"):
                S.read_secret(path)
    path.chmod(0o600)
    # Rotation: a new secret, owner-only; the seeds of every part change.
    rotated = S.rotate(path)
    assert rotated != secret and S.read_secret(path) == rotated
    assert path.stat().st_mode & 0o777 == 0o600
    assert rotated.seed("hw5", "hw5.squares") != secret.seed("hw5", "hw5.squares")
    assert not [p for p in path.parent.iterdir() if p.name != S.FILE_NAME]  # no leftovers


def test_seeds_depend_on_the_secret_and_the_part_alone() -> None:
    a, b = S.Secret(b"a" * 32), S.Secret(b"b" * 32)
    assert a.seed("hw5", "hw5.squares") == S.Secret(b"a" * 32).seed("hw5", "hw5.squares")
    assert a.seed("hw5", "hw5.squares") != a.seed("hw5", "hw5.double")
    assert a.seed("hw5", "hw5.squares") != b.seed("hw5", "hw5.squares")
    assert 0 <= a.seed("hw5", "hw5.squares") < 2 ** 63
    assert a.fingerprint != b.fingerprint and a.key.hex() not in a.fingerprint


# --------------------------------------------------------------------------- grading


@pytest.mark.slow
def test_identical_submissions_get_one_grade_on_every_run_and_replay_reproduces_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from edu_dl.cli import main

    subs, src = _course(tmp_path)
    failing, passing = _secrets()
    out = tmp_path / "grades"
    _write_secret(out, failing)
    first = G.grade(subs, src, out, settings=FAST, jobs=2, progress=False, log=lambda s: None)
    assert first.graded == 8 and first.secret == failing.fingerprint
    assert set(_grades(first).values()) == {(0.0, "failed")}, _grades(first)
    # --force draws the same inputs again: the same grade for all eight.
    forced = G.grade(subs, src, out, settings=FAST, jobs=2, force=True, progress=False,
                     log=lambda s: None)
    assert forced.graded == 8 and _grades(forced) == _grades(first)
    # Another secret, other inputs: this flaw then passes. So the grade does rest on the
    # inputs, and only the secret (never the student or the run) decides them.
    few, _ = _course(tmp_path / "few", STUDENTS[:2])
    other = tmp_path / "other"
    _write_secret(other, passing)
    assert set(_grades(G.grade(few, src, other, settings=FAST, jobs=2, progress=False,
                               log=lambda s: None)).values()) == {(2.0, "passed")}

    # Replay: the stored run judged again gives the gradebook's rows exactly, case by case.
    found = replay(out, "s3", "hw5", src)
    assert found.same and found.fingerprint == failing.fingerprint
    assert [(r.part, r.points, r.status) for r in found.rows] == \
        [("hw5.squares", 0.0, "failed"), ("hw5.double", 1.0, "passed")]
    squares = next(p for p in found.parts if p.part_id == "hw5.squares")
    assert [(c.hidden, c.ok) for c in squares.cases] == [(False, True), (True, False)]
    n = _hidden_n(failing)
    assert squares.cases[1].args == (n,) and list(squares.cases[1].got) == [0] * n
    double_before = next(p for p in found.parts if p.part_id == "hw5.double").cases[1].args[0]
    capsys.readouterr()
    assert main(["replay", str(out), "s3", "hw5", "--source", str(src)]) == 0
    text = capsys.readouterr().out
    assert f"inputs:   ({n})" in text and "WRONG" in text
    assert "the same rows as the gradebook's" in text
    # A gradebook row that is not what the run gives is caught.
    with db.store(out).transaction() as conn:
        conn.execute(db.rows.update().where(db.rows.c.student == "s3", db.rows.c.seq == 0)
                     .values(points=2.0))
    assert not replay(out, "s3", "hw5", src).same
    assert main(["replay", str(out), "s3", "hw5", "--source", str(src)]) == 1
    assert "DIFFERENT" in capsys.readouterr().out

    # Rotating the secret: new hidden inputs, and everyone is graded again.
    assert main(["grade", str(subs), "--source", str(src), "--out", str(out), "--timeout", "30",
                 "--memory", "2048", "--jobs", "2", "--rotate-secret"]) == 0
    assert "graded 8 submissions" in capsys.readouterr().out
    rotated = S.read_secret(out / S.FILE_NAME)
    assert rotated != failing and (out / S.FILE_NAME).stat().st_mode & 0o777 == 0o600
    after = replay(out, "s3", "hw5", src)
    assert after.same and after.fingerprint == rotated.fingerprint
    double_after = next(p for p in after.parts if p.part_id == "hw5.double").cases[1].args[0]
    assert not np.array_equal(double_before, double_after)
    # The old secret no longer replays the new run, and says why.
    from edu_dl.grading.stages.replay import ReplayError

    with pytest.raises(ReplayError, match="rotated since"):
        replay(out, "s3", "hw5", src, secret=failing)
    # Unchanged since: nothing is graded again.
    assert G.grade(subs, src, out, settings=Settings(timeout_s=30.0, memory_mb=2048),
                   progress=False, log=lambda s: None).graded == 0


@pytest.mark.slow
def test_a_cluster_draws_the_same_inputs_and_never_gets_the_secret(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    from test_cluster import _Recording

    from edu_dl.grading.stages import cluster as C

    subs, src = _course(tmp_path)
    failing, _ = _secrets()
    out = tmp_path / "grades"
    _write_secret(out, failing)
    with C.local_cluster(2) as client:
        recording = _Recording(client)
        summary = G.grade(subs, src, out, settings=FAST, progress=False, log=lambda s: None,
                          cluster=C.ClusterOptions(client=recording))
    assert summary.graded == 8 and summary.isolated
    assert set(_grades(summary).values()) == {(0.0, "failed")}, _grades(summary)
    assert len(recording.sent) == 8
    for sent in recording.sent:  # the inputs travel, the secret never does
        assert failing.key not in sent and failing.key.hex().encode() not in sent
    # The resume keys are a local run's: nothing is graded again here.
    assert G.grade(subs, src, out, settings=FAST, progress=False,
                   log=lambda s: None).graded == 0


def test_the_secret_is_created_on_the_first_grade_and_settable(tmp_path: Path) -> None:
    subs, src = _course(tmp_path, STUDENTS[:1])
    out = tmp_path / "grades"
    messages: list[str] = []
    summary = G.grade(subs, src, out, settings=FAST, progress=False, log=messages.append)
    made = S.read_secret(out / S.FILE_NAME)
    assert summary.secret == made.fingerprint
    assert (out / S.FILE_NAME).stat().st_mode & 0o777 == 0o600
    assert any("created the grading secret" in m for m in messages)
    assert made.key.hex() not in "".join(messages)
    # Kept with the grades: the run record names its fingerprint, never the secret.
    run = (out / ".work" / "s0" / "hw5" / "run.json").read_text()
    assert json.loads(run)["secret"] == made.fingerprint and made.key.hex() not in run
    # A secret given from elsewhere (--secret-file) is used as it is.
    from edu_dl.cli import main

    given = tmp_path / "mine" / "secret"
    given.parent.mkdir()
    S.load_or_create(given)
    assert main(["grade", str(subs), "--source", str(src), "--out", str(out), "--timeout", "30",
                 "--memory", "2048", "--secret-file", str(given)]) == 0
    with db.store(out).transaction() as conn:
        kept = conn.execute(db.submissions.select().where(db.submissions.c.student == "s0")).one()
    assert kept.secret == S.read_secret(given).fingerprint  # another secret: regraded
    # ... unless every sandbox would see it: inside the software shown to them, read-only.
    import edu_dl

    inside = Path(edu_dl.__file__).parent / f".secret-test-{os.getpid()}"
    try:
        S.load_or_create(inside)
        with pytest.raises(S.SecretError, match="every sandbox sees"):
            G.grade(subs, src, out, settings=FAST, progress=False, log=lambda s: None,
                    secret=S.read_secret(inside))
    finally:
        inside.unlink(missing_ok=True)
    given.unlink()
    given.symlink_to(out / S.FILE_NAME)
    assert main(["grade", str(subs), "--source", str(src), "--out", str(out),
                 "--secret-file", str(given)]) == 2  # a link is refused, nothing graded


def test_validate_is_the_same_every_time_and_never_uses_a_grading_secret(
        tmp_path: Path) -> None:
    from edu_dl.grading.term.validate import validate

    subs, src = _course(tmp_path, STUDENTS[:1])
    notebook = subs / "s0" / "hw5.ipynb"
    reports = [validate(notebook, timeout=30, progress=False, source=src, log=lambda s: None)
               for _ in range(2)]
    got = [[(p.part_id, p.points, p.ok) for p in r.parts] for r in reports]
    assert got[0] == got[1]
    # Its inputs come from the public validation secret: the flaw shows exactly when that
    # secret draws an even n.
    flawed = _hidden_n(S.VALIDATION_SECRET) % 2 == 0
    assert got[0][0] == ("hw5.squares", 0.0 if flawed else 2.0, not flawed)
    assert not list(tmp_path.rglob(S.FILE_NAME))  # no secret written anywhere


def test_replay_reproduces_every_row_of_the_nbgrader_fixture_course(tmp_path: Path) -> None:
    """Assert cells, partial credit, stderr, answers, tasks: each replayed row is the
    gradebook's, and a changed submission is refused rather than replayed."""
    from fixtures import nbgrader_course as course

    from edu_dl.grading.stages.replay import ReplayError

    src, root = course.build(tmp_path / "course")
    out = tmp_path / "grades"
    summary = G.grade(root, src, out, settings=FAST, jobs=2, progress=False, log=lambda s: None)
    replayed = 0
    for student in sorted({r.student for r in summary.rows}):
        try:
            found = replay(out, student, course.NOTEBOOK, src)
        except ReplayError as exc:
            assert "no stored run" in str(exc)
            continue
        assert found.kept is not None and found.same, (student, found.rows, found.kept)
        replayed += 1
    assert replayed >= len(course.EXPECTED) - 2
    carol = root / "submitted" / "carol" / course.ASSIGNMENT / f"{course.NOTEBOOK}.ipynb"
    carol.write_bytes(carol.read_bytes() + b"\n")
    with pytest.raises(ReplayError, match="changed since it was graded"):
        replay(out, "carol", course.NOTEBOOK, src)
