"""Exercise 1 (getting started), public half: the source checks of the parts whose answer
``edu_dl.machine.hardware`` itself computes. Nothing here computes an answer.

The course's own doctor reads /proc/cpuinfo and computes a peak FLOP/s
(``edu_dl.machine.hardware``); a student's function may not hand the part back to it, so these
checks fail a source that calls those helpers. The values are judged against the private oracle;
the hints are data.
"""

from __future__ import annotations

from edu_dl.grading.authoring.source import NamesCheck, names_check

CALLS_PEAK = ("this part asks you to write the formula yourself: cores x clock x FLOPs per cycle "
              "(do not call edu_dl.machine.hardware.peak_flops or flops_per_cycle)")
CALLS_MACHINE = ("this part asks you to combine the facts yourself (your peak_gflops may help; "
                 "do not call edu_dl.machine.hardware's peak_flops, flops_per_cycle or "
                 "cpu_from_cpuinfo)")

PEAK_SOURCE: NamesCheck = names_check(forbidden=[(("peak_flops", "flops_per_cycle"),
                                                    CALLS_PEAK)])
MACHINE_SOURCE: NamesCheck = names_check(forbidden=[(
    ("peak_flops", "flops_per_cycle", "cpu_from_cpuinfo"), CALLS_MACHINE)])
