"""edu_dl.notebook.measured: the sentences lectures print about two timings, and the turns."""

from __future__ import annotations

import itertools

import pytest

from edu_dl.notebook.measured import (
    busy_warning,
    compare,
    medians_and_pairs,
    quartiles,
    spread,
    time_and_compare,
    time_in_turns,
    verdict,
)


def test_a_clear_gap_is_ranked_both_ways() -> None:
    slow, fast = [2.0, 2.2, 1.9, 2.1, 2.0], [1.0, 1.0, 1.0, 1.0, 1.0]
    said = compare("fed", slow, "Variables", fast)
    assert said.startswith("fed is slower than Variables: it takes 2.00x the time")
    said = compare("Variables", fast, "fed", slow)
    assert said.startswith("Variables is faster than fed: it takes 0.50x the time")


def test_ratios_on_both_sides_of_one_are_not_ranked() -> None:
    # A is faster in two rounds and slower in three: the median alone would call A slower
    a, b = [1.1, 0.9, 1.2, 0.8, 1.05], [1.0] * 5
    said = compare("static", a, "eager", b)
    assert "about the same time" in said and "too close to rank" in said
    assert "slower" not in said and "faster" not in said


def test_the_ratios_are_paired_by_round() -> None:
    # a load that doubles both programs in one round leaves every paired ratio at 1.5
    a, b = [1.5, 3.0, 1.5, 3.0], [1.0, 2.0, 1.0, 2.0]
    assert "1.50x" in compare("a", a, "b", b) and "slower" in compare("a", a, "b", b)


def test_unpaired_rounds_are_refused() -> None:
    with pytest.raises(ValueError, match="paired"):
        compare("a", [1.0, 2.0], "b", [1.0])
    with pytest.raises(ValueError, match="paired"):
        compare("a", [], "b", [])


def test_quartiles_and_spread() -> None:
    assert quartiles([3.0]) == (3.0, 3.0, 3.0)
    assert quartiles([1.0, 2.0, 3.0, 4.0, 5.0]) == (2.0, 3.0, 4.0)
    assert spread([0.001, 0.002, 0.003, 0.004, 0.005]) == "3 ms (2 to 4)"


def test_programs_take_turns_after_one_warm_up_each() -> None:
    calls: list[str] = []
    ticks = itertools.count()  # a clock that advances one second per reading

    samples = time_in_turns({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
                            rounds=3, number=2, clock=lambda: float(next(ticks)))
    assert calls == ["a", "b"] + ["a", "a", "b", "b"] * 3
    assert samples == {"a": [0.5] * 3, "b": [0.5] * 3}  # one second over two calls


def test_time_and_compare_prints_the_table_and_one_verdict_per_pair(capsys) -> None:
    now = [0.0]
    cost = {"slow one": 2.0, "fast": 1.0}  # seconds each call moves a fake clock on

    def program(name: str):
        return lambda: now.__setitem__(0, now[0] + cost[name])

    samples = time_and_compare({name: program(name) for name in cost},
                               [("fast", "slow one")], rounds=3, per="step",
                               clock=lambda: now[0])
    assert samples == {"slow one": [2.0] * 3, "fast": [1.0] * 3}
    assert capsys.readouterr().out.splitlines() == [
        "time per step: median (middle half of 3 rounds)",
        "  slow one  2e+03 ms (2e+03 to 2e+03)",
        "  fast      1e+03 ms (1e+03 to 1e+03)",
        "fast is faster than slow one: it takes 0.50x the time (the middle half of 3 rounds "
        "between 0.50x and 0.50x)"]
    with pytest.raises(ValueError, match=r"\['slow'\] to compare"):
        time_and_compare({"fast": lambda: None}, [("fast", "slow")])


def test_time_in_turns_needs_a_round() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        time_in_turns({"a": lambda: None}, rounds=0)


def test_verdict_agrees_with_the_sentence() -> None:
    fast, slow, mixed = [1.0] * 5, [2.0] * 5, [1.1, 0.9, 1.2, 0.8, 1.05]
    assert verdict(slow, fast) == 1 and "slower" in compare("a", slow, "b", fast)
    assert verdict(fast, slow) == -1 and "faster" in compare("a", fast, "b", slow)
    assert verdict(mixed, fast) == 0 and "about the same" in compare("a", mixed, "b", fast)


def test_a_steady_gap_within_the_margin_is_not_ranked() -> None:
    # every round 3% slower: steady, but too small to teach anything on a shared machine
    assert verdict([1.03] * 7, [1.0] * 7) == 0
    assert verdict([1.0] * 7, [1.03] * 7) == 0
    assert verdict([1.08] * 7, [1.0] * 7) == 1


def test_medians_and_pairs_can_differ() -> None:
    # the load doubles a in round 1 and b in round 2: the medians differ, every other pair is 1.0
    a, b = [1.0, 2.0, 1.0, 1.0, 2.0], [1.0, 1.0, 2.0, 1.0, 2.0]
    said = medians_and_pairs("a", a, "b", b)
    assert said.startswith("a / b: 1.00x from the two medians; 1.00x from the 5 rounds paired")
    a, b = [3.0, 3.0, 1.0, 1.0, 3.0], [2.0, 2.0, 1.0, 1.0, 2.0]
    assert "1.50x from the two medians; 1.50x" in medians_and_pairs("a", a, "b", b)
    # medians from different rounds: 2.0 / 1.0 by the medians, 1.0 by the pairs
    a, b = [1.0, 2.0, 2.0, 2.0, 4.0], [1.0, 1.0, 1.0, 2.0, 4.0]
    said = medians_and_pairs("a", a, "b", b)
    assert "2.00x from the two medians" in said and "1.00x from the 5 rounds paired" in said


def test_busy_warning_by_spread_and_by_load() -> None:
    steady = {"a": [1.0, 1.01, 0.99, 1.0, 1.02], "b": [2.0, 2.02, 1.98, 2.0, 2.01]}
    quiet = busy_warning(steady, load=0.5, cores=2)
    assert quiet.startswith("the machine looked quiet") and "load average 0.5 on 2 cores" in quiet
    assert "WARNING" not in quiet
    noisy = {"a": [1.0, 1.5, 1.0, 1.6, 1.0], "b": steady["b"]}
    said = busy_warning(noisy, load=0.5, cores=2)
    assert said.startswith("WARNING: this machine was busy") and "a 50%" in said
    assert busy_warning(steady, load=3.1, cores=2).startswith("WARNING")


def test_busy_warning_reads_this_machine() -> None:
    said = busy_warning({"a": [1.0, 1.0, 1.0]})
    from edu_dl.machine import hardware

    assert f"on {int(hardware.usable_cores().value)} core" in said or "no load average" in said
