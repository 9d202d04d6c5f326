"""A printed torch.profiler table read back by its header: the parsed cells agree with the
profile's own events, the H100 table that lectures 17 and 05 show reads by column name, and a
layer's time counts each call once where autocast records a convolution as two nested events."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.frameworks import torch

from edu_dl.notebook.profiler_text import (
    layer_time,
    microseconds,
    once_per_call,
    read_profiler_table,
)

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


def test_the_h100_profile_counts_each_convolution_once() -> None:
    """The recorded step under autocast: aten::conv2d has 106 events for ResNet-50's 53
    convolutions (every other layer row has 53), each call an event inside an event of the same
    name. Counted once, the convolutions are a third of the step's GPU time and batch norm half
    of it (1.5x them); the row as printed would say 44% and 1.14x, with the forward convolutions
    slower than their backward, which computes two gradients."""
    table = read_profiler_table(H100_TABLE.read_text())
    step = microseconds(table.totals["Self CUDA time total"])
    conv = layer_time(table, "aten::conv2d", "ConvolutionBackward0")
    bn = layer_time(table, "aten::batch_norm", "NativeBatchNormBackward0")
    assert (conv.calls, conv.forward_events, conv.events_per_call) == (53, 106, 2)
    assert (bn.calls, bn.events_per_call) == (53, 1)
    assert conv.forward_us == pytest.approx(6767.0 / 2) and conv.backward_us == 6463.0
    assert conv.forward_us < conv.backward_us  # backward: gradients of the input and the weights
    assert bn.total_us == pytest.approx(6102.0 + 8952.0)
    assert conv.total_us / step == pytest.approx(0.3305, abs=5e-4)
    assert bn.total_us / step == pytest.approx(0.5053, abs=5e-4)
    assert bn.total_us / conv.total_us == pytest.approx(1.529, abs=1e-3)


def test_a_row_that_is_not_a_whole_multiple_of_the_calls_is_refused() -> None:
    table = read_profiler_table(H100_TABLE.read_text())
    with pytest.raises(ValueError, match="not a whole multiple of 40 calls"):
        once_per_call(table, "aten::conv2d", 40)
    assert once_per_call(table, "aten::batch_norm", 53) == 6102.0


def test_autocast_records_a_convolution_inside_a_convolution_and_each_is_counted_once() -> None:
    """A live CPU profile under autocast: each conv2d call is an aten::conv2d event holding a
    second one, so the printed row's total is the outer events' sum plus the inner ones'; the
    layer's time, halved, lies between the inner and the outer events' sums."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                              torch.nn.Conv2d(8, 8, 3))
    x = torch.randn(4, 3, 24, 24)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = net(x).float().square().mean()
        loss.backward()
    convs = [e for e in prof.events() if e.name == "aten::conv2d"]
    inner = [e for e in convs if e.cpu_parent is not None and e.cpu_parent.name == "aten::conv2d"]
    outer = [e for e in convs if e not in inner]
    assert len(outer) == len(inner) == 2  # two layers, each call recorded twice
    outer_us = sum(e.cpu_time_total for e in outer)
    inner_us = sum(e.cpu_time_total for e in inner)

    table = read_profiler_table(prof.key_averages().table(sort_by="cpu_time_total"))
    printed = microseconds(table.row("aten::conv2d")["CPU total"])
    assert printed == pytest.approx(outer_us + inner_us, rel=1e-3, abs=1e-3)  # the double count
    conv = layer_time(table, "aten::conv2d", "ConvolutionBackward0", column="CPU total")
    assert (conv.calls, conv.forward_events, conv.events_per_call) == (2, 4, 2)
    assert inner_us * (1 - 1e-3) <= conv.forward_us <= outer_us * (1 + 1e-3)
    assert conv.forward_us < printed
