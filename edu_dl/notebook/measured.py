"""Timings a lecture can state a conclusion from: measured in turns, compared with their spread.

A lecture that writes "A is faster than B" in its prose is contradicted the day a busy machine
measures the opposite. Lectures instead print the sentence that `compare` computes from their own
measurements: it ranks two programs only when the middle half of the per-round ratios lies beyond
5% on one side of 1, and otherwise says that this machine cannot tell them apart.

`time_in_turns` runs the programs round-robin (a, b, c, a, b, c, ...), so a load that comes and
goes on a shared machine falls on all of them alike, and round k of one program can be paired with
round k of another. `medians_and_pairs` prints the two ways of dividing the timings (the medians'
ratio and the paired rounds' ratio) side by side, and `busy_warning` says when the machine was
too busy for either to be trusted.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence

# A ratio within 5% of 1 ranks nothing: on a shared machine that is noise, and no lesson of its own.
MARGIN = 1.05
# On a quiet machine the rounds of one program agree within a few percent. When the middle half of
# a program's rounds spans more than this fraction of their median, other work took the CPU in
# some rounds and not in others.
BUSY_SPREAD = 0.20


def quartiles(samples: Sequence[float]) -> tuple[float, float, float]:
    """(first quartile, median, third quartile); a single sample is all three."""
    if len(samples) == 1:
        return samples[0], samples[0], samples[0]
    low, middle, high = statistics.quantiles(samples, n=4, method="inclusive")
    return low, middle, high


def time_in_turns(programs: Mapping[str, Callable[[], object]], rounds: int = 7,
                  number: int = 1, clock: Callable[[], float] = time.perf_counter,
                  ) -> dict[str, list[float]]:
    """Seconds per call of each program, one figure per round, the programs taking turns.

    Each program is called once first, untimed (warm-up: plans, traces, allocations).
    """
    if rounds < 1 or number < 1:
        raise ValueError(f"rounds and number must be at least 1, not {rounds} and {number}")
    for program in programs.values():
        program()
    samples: dict[str, list[float]] = {name: [] for name in programs}
    for _ in range(rounds):
        for name, program in programs.items():
            start = clock()
            for _ in range(number):
                program()
            samples[name].append((clock() - start) / number)
    return samples


def time_and_compare(programs: Mapping[str, Callable[[], object]],
                     pairs: Sequence[tuple[str, str]] = (), *, rounds: int = 7, number: int = 1,
                     per: str = "call", scale: float = 1e3, unit: str = "ms",
                     clock: Callable[[], float] = time.perf_counter) -> dict[str, list[float]]:
    """Time the programs in turns (`time_in_turns`), print each one's median and middle half,
    then one `compare` sentence for each (A, B) in ``pairs``; return the rounds.

    ``time_and_compare({"a": f, "b": g}, [("a", "b")], rounds=9)`` prints::

        time per call: median (middle half of 9 rounds)
          a  2.51 ms (2.40 to 2.73)
          b  3.02 ms (2.95 to 3.10)
        a is faster than b: it takes 0.83x the time (...)
    """
    unknown = sorted({name for pair in pairs for name in pair} - set(programs))
    if unknown:
        raise ValueError(f"time_and_compare: {unknown} to compare, but the programs are "
                         f"{list(programs)}")
    samples = time_in_turns(programs, rounds=rounds, number=number, clock=clock)
    print(f"time per {per}: median (middle half of {rounds} rounds)")
    width = max(len(name) for name in samples)
    for name, times in samples.items():
        print(f"  {name:{width}s}  {spread(times, scale, unit)}")
    for a, b in pairs:
        print(compare(a, samples[a], b, samples[b]))
    return samples


def spread(samples: Sequence[float], scale: float = 1e3, unit: str = "ms") -> str:
    """'2.51 ms (2.40 to 2.73)': the median and the middle half of the samples."""
    low, middle, high = quartiles([s * scale for s in samples])
    return f"{middle:.3g} {unit} ({low:.3g} to {high:.3g})"


def verdict(samples_a: Sequence[float], samples_b: Sequence[float]) -> int:
    """+1 if A is slower than B, -1 if faster, 0 if this machine cannot tell (see `compare`)."""
    low, _, high = quartiles(paired_ratios(samples_a, samples_b))
    return 1 if low > MARGIN else -1 if high < 1 / MARGIN else 0


def paired_ratios(samples_a: Sequence[float], samples_b: Sequence[float]) -> list[float]:
    """Round k of A divided by round k of B."""
    if not samples_a or len(samples_a) != len(samples_b):
        raise ValueError(f"need paired rounds, got {len(samples_a)} and {len(samples_b)}")
    return [a / b for a, b in zip(samples_a, samples_b, strict=True)]


def compare(name_a: str, samples_a: Sequence[float], name_b: str,
            samples_b: Sequence[float]) -> str:
    """One sentence comparing A's time with B's, from the rounds' paired ratios.

    Round k of A is divided by round k of B; the sentence ranks them only when the middle half of
    those ratios lies on one side of 1, beyond MARGIN.
    """
    ratios = paired_ratios(samples_a, samples_b)
    low, middle, high = quartiles(ratios)
    spread_text = f"the middle half of {len(ratios)} rounds between {low:.2f}x and {high:.2f}x"
    side = verdict(samples_a, samples_b)
    if side > 0:
        return f"{name_a} is slower than {name_b}: it takes {middle:.2f}x the time ({spread_text})"
    if side < 0:
        return f"{name_a} is faster than {name_b}: it takes {middle:.2f}x the time ({spread_text})"
    return (f"{name_a} and {name_b} take about the same time here: {middle:.2f}x, with "
            f"{spread_text}, too close to rank on this machine")


def medians_and_pairs(name_a: str, samples_a: Sequence[float], name_b: str,
                      samples_b: Sequence[float]) -> str:
    """The ratio of A's median to B's beside the median of the paired rounds' ratios (the one
    `compare` ranks by): on a machine whose load comes and goes the two can differ."""
    ratios = paired_ratios(samples_a, samples_b)
    by_medians = statistics.median(samples_a) / statistics.median(samples_b)
    return (f"{name_a} / {name_b}: {by_medians:.2f}x from the two medians; "
            f"{statistics.median(ratios):.2f}x from the {len(ratios)} rounds paired "
            "(what the verdict uses)")


def _load_average() -> float | None:
    """The 1-minute load average; None where the OS has none (Windows)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def busy_warning(samples: Mapping[str, Sequence[float]], load: float | None = None,
                 cores: int | None = None) -> str:
    """A line saying whether the machine looked busy while ``samples`` were measured.

    Two criteria, either one enough: some program's middle half of rounds spans more than
    BUSY_SPREAD of its median (other work came and went between rounds), or the 1-minute load
    average exceeds the usable cores (processes were waiting for a core). ``load`` and ``cores``
    default to this machine's (its load average, and ``hardware.usable_cores``: the affinity
    mask capped by a container's CPU quota); pass them to test.
    """
    from edu_dl.machine import hardware

    load = _load_average() if load is None else load
    cores = int(hardware.usable_cores().value) if cores is None else cores
    widths = {}
    for name, times in samples.items():
        low, middle, high = quartiles(times)
        widths[name] = (high - low) / middle if middle > 0 else 0.0
    shown = ", ".join(f"{name} {width:.0%}" for name, width in widths.items())
    load_text = ("no load average on this OS" if load is None
                 else f"load average {load:.1f} on {cores} core{'s' if cores != 1 else ''}")
    facts = (f"width of the rounds' middle half, as a share of the median: {shown} (busy above "
             f"{BUSY_SPREAD:.0%}); {load_text}")
    wide = [name for name, width in widths.items() if width > BUSY_SPREAD]
    if wide or (load is not None and load > cores):
        return (f"WARNING: this machine was busy while it measured ({facts}): the times above mix "
                "the programs with other work; run the cell again when it is quieter before "
                "reading a ranking into them")
    return f"the machine looked quiet while it measured ({facts})"
