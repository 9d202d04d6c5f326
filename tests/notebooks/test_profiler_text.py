"""A printed torch.profiler table read back by its header: the parsed cells agree with the
profile's own events, and the H100 table that lecture 12 shows reads by column name."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.frameworks import torch

from edu_dl.notebook.profiler_text import microseconds, read_profiler_table

ROOT = Path(__file__).resolve().parents[2]
H100_TABLE = (ROOT / "benchmarks" / "gpu" / "nvidia-h100-80gb-hbm3" / "practice_probe"
              / "profiler_resnet50_bf16.txt")


@pytest.mark.parametrize(("cell", "us"), [("614.642us", 614.642), ("8.952ms", 8952.0),
                                          ("1.193s", 1.193e6), ("0.000us", 0.0)])
def test_microseconds_reads_each_unit(cell: str, us: float) -> None:
    assert microseconds(cell) == pytest.approx(us)


@pytest.mark.parametrize("cell", ["55.52%", "12", "", "3.1 ms", "ms"])
def test_microseconds_refuses_what_is_not_a_duration(cell: str) -> None:
    with pytest.raises(ValueError, match="not a profiler duration"):
        microseconds(cell)


def test_a_printed_cpu_profile_reads_back_as_its_events() -> None:
    x = torch.randn(64, 64)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            torch.relu(x @ x).sum()
    events = {e.key: e for e in prof.key_averages()}
    table = read_profiler_table(prof.key_averages().table(sort_by="self_cpu_time_total"))
    assert table.columns[:3] == ["Name", "Self CPU %", "Self CPU"] and "# of Calls" in table.columns
    assert {row["Name"] for row in table.rows} == set(events)
    for row in table.rows:
        event = events[row["Name"]]
        assert int(row["# of Calls"]) == event.count
        # the table rounds to three decimals of its unit (us, ms or s)
        assert microseconds(row["Self CPU"]) == pytest.approx(event.self_cpu_time_total,
                                                              rel=1e-3, abs=1e-3)
    total = sum(e.self_cpu_time_total for e in events.values())
    assert microseconds(table.totals["Self CPU time total"]) == pytest.approx(total, rel=1e-3)


def test_the_recorded_h100_table_reads_by_column_name() -> None:
    table = read_profiler_table(H100_TABLE.read_text())
    assert len(table.rows) == 12 and "Self CUDA" in table.columns
    backward = table.row("aten::native_batch_norm_backward")
    assert backward["# of Calls"] == "53" and microseconds(backward["Self CUDA"]) == 8952.0
    assert microseconds(table.row("aten::conv2d")["CUDA total"]) == 6767.0
    assert microseconds(table.totals["Self CUDA time total"]) == 29792.0
    with pytest.raises(KeyError, match="no row named"):
        table.row("aten::matmul")


@pytest.mark.parametrize("text", ["", "Name  Calls\nrelu  3\n", "-----  ---\nOther  x\n-----  ---\n"
                                  "a  b\n-----  ---\n"])
def test_what_is_not_a_profiler_table_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a profiler table"):
        read_profiler_table(text)
