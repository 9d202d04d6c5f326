"""Moved to ``edu_dl.bench.twins`` (``edu-dl bench twins``); kept for the notebooks."""

from edu_dl.bench.twins import SPECS, WARMUP_STEPS, measure

__all__ = ["SPECS", "WARMUP_STEPS", "measure"]
