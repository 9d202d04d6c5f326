"""The suite's own schedule: the costliest tests first, handed to xdist's workers one at a time."""

from __future__ import annotations

import pytest
from conftest import cost_rank


def test_xdist_hands_out_one_test_at_a_time(request: pytest.FixtureRequest) -> None:
    # In chunks (xdist's default), the first quarter of a costliest-first order went to one
    # worker and the unit phase took 1.6x as long.
    assert request.config.getoption("maxschedchunk") == 1


def test_the_costliest_tests_come_first(request: pytest.FixtureRequest) -> None:
    ranks = [cost_rank(item) for item in request.session.items]
    assert ranks == sorted(ranks)
