"""What an instructor writes: a part (``spec``), its hints (``hints``, ``generic``), the guard
around a student's call (``guard``), source checks (``source``), part files (``parts``), hidden
cases (``withhold``) and the data-only student release (``release``).

Below the stages and the term, above the sandbox and ``trust``: ``check()`` and the grader both
judge with what is here, so a student's kernel imports this room and nothing above it.
"""
