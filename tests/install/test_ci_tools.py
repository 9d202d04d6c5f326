"""The suite's own tools: the costliest tests first, handed to xdist's workers one at a time;
.ci/phase's timing of each phase and .ci/cost_by_folder.py's cost table."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest


def test_xdist_hands_out_one_test_at_a_time(request: pytest.FixtureRequest) -> None:
    # In chunks (xdist's default), the first quarter of a costliest-first order went to one
    # worker and the unit phase took 1.6x as long.
    assert request.config.getoption("maxschedchunk") == 1


def test_the_costliest_tests_come_first(request: pytest.FixtureRequest) -> None:
    # tests/conftest.py's cost_rank, from the plugins: "conftest" may name another folder's
    (cost_rank,) = {plugin.cost_rank for plugin in request.config.pluginmanager.get_plugins()
                    if hasattr(plugin, "cost_rank")}
    ranks = [cost_rank(item) for item in request.session.items]
    assert ranks == sorted(ranks)


ROOT = Path(__file__).resolve().parents[2]


def test_a_phase_passes_its_output_and_status_through_and_says_its_time_and_cpu(
        tmp_path: Path) -> None:
    log = tmp_path / "phases.tsv"
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n" \
           "print('out'); import sys; print('err', file=sys.stderr); sys.exit(3)"
    done = subprocess.run([str(ROOT / ".ci/phase"), str(log), "burn", sys.executable, "-c", burn],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 3
    assert done.stdout.startswith("out\nphase burn: ")
    assert re.search(r"phase burn: \d+ s, the machine's CPUs busy \d+ s \(\d+% of \d+ cores\)",
                     done.stdout), done.stdout
    assert "burn" in done.stdout.split("make test, by phase (seconds):")[1]  # a failure: the table
    assert done.stderr == "err\n"
    name, _, status, start = log.read_text().rstrip("\n").split("\t")
    assert (name, status) == ("burn", "3") and abs(int(start) - time.time()) < 60


def test_the_table_names_phases_side_by_side_and_totals_the_wall_clock(tmp_path: Path) -> None:
    log = tmp_path / "phases.tsv"  # the notebooks and the ordinary user's pass overlapped
    log.write_text("types\t30\t0\t1000\nunit\t900\t0\t1030\nordinary-user\t100\t1\t1930\n"
                   "notebooks\t200\t0\t1930\n")
    table = subprocess.run([str(ROOT / ".ci/phase"), str(log), "--table"], capture_output=True,
                           text=True, check=True, timeout=60).stdout.splitlines()
    assert table[1:] == ["  types              30 s", "  unit              900 s",
                         "  ordinary-user     100 s  (beside notebooks)  (failed)",
                         "  notebooks         200 s  (beside ordinary-user)",
                         "  total            1130 s"]
    log.write_text("a\t3\t0\nb\t4\t0\n")  # a log without start times: one after the other
    table = subprocess.run([str(ROOT / ".ci/phase"), str(log), "--table"], capture_output=True,
                           text=True, check=True, timeout=60).stdout.splitlines()
    assert table[-1] == "  total               7 s"


def test_the_cost_table_sums_each_workers_busy_time(tmp_path: Path) -> None:
    report = tmp_path / "unit.xml"
    cases = "".join(
        f'<testcase classname="tests.engine.test_x" name="t{i}" time="{t}"><properties>'
        f'<property name="worker" value="{w}"/></properties></testcase>'
        for i, (t, w) in enumerate([(1.5, "gw0"), (2.0, "gw1"), (3.0, "gw0")]))
    report.write_text(f'<testsuites><testsuite name="pytest">{cases}</testsuite></testsuites>')
    done = subprocess.run([sys.executable, str(ROOT / ".ci/cost_by_folder.py"), str(report)],
                          capture_output=True, text=True, check=True, timeout=60)
    assert "  tests/engine                     3 tests      6.5 s" in done.stdout
    assert done.stdout.rstrip().endswith("gw0 4 s, gw1 2 s")


def test_the_notebook_table_sums_each_notebooks_cells_costliest_first(tmp_path: Path) -> None:
    report = tmp_path / "notebooks.xml"
    cells = [("lectures.01_a.ipynb", 1.0), ("solutions.02_b.ipynb", 4.0),
             ("lectures.01_a.ipynb", 2.5), ("lectures.03_c.ipynb", 0.5)]
    cases = "".join(f'<testcase classname="{nb}" name="Cell {i}" time="{t}"/>'
                    for i, (nb, t) in enumerate(cells))
    report.write_text(f'<testsuites><testsuite name="pytest">{cases}</testsuite></testsuites>')
    done = subprocess.run([sys.executable, str(ROOT / ".ci/cost_by_folder.py"), "--notebooks",
                           str(report)], capture_output=True, text=True, check=True, timeout=60)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("notebooks by cost") and "3 notebooks, 8 s" in lines[0]
    assert [line.split()[0] for line in lines[1:]] == [
        "solutions/02_b.ipynb", "lectures/01_a.ipynb", "lectures/03_c.ipynb"]
    assert lines[2].endswith(" 3.5 s")
