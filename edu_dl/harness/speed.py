"""The speed tasks' old address: they live in :mod:`edu_dl.speed.tasks` (issue 42).

Kept so that an exercise copied before the move (``from edu_dl.harness.speed import
standardize_reference``) still runs; the course itself imports ``edu_dl.speed.tasks``.
"""

from edu_dl.speed.tasks import (  # noqa: F401 (re-exported for old copies)
    CALLS_THE_REFERENCE,
    SPEED_ROW,
    TASKS,
    NormalPool,
    SpeedTask,
    call_input,
    call_inputs,
    indicative_ratio,
    max_pool_inputs,
    max_pool_reference,
    normal_pool,
    sgd_step_inputs,
    sgd_step_reference,
    show_indicative_ratio,
    speed_row,
    standardize_inputs,
    standardize_reference,
)
