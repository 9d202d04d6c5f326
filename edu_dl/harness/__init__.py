"""How each of the course's exercises calls and judges a student's function: public code.

The course's part files (``solutions/parts/<exercise>.private.py``) hold the oracles, the hidden
cases and the mistake replays; they stay beside the source. What ``check()`` needs beside the
frozen cases of a release (``exercises/parts/<exercise>.npz``) lives here, in the package every
student has: how a part calls the function (``call=``), comparisons and result checks that judge
properties rather than values, and source checks. Nothing here computes an answer: the release
test (``tests/exercises/test_release.py``) calls every function here on every visible case and
fails if any returns the expected value. The speed tasks live below, in :mod:`edu_dl.speed`.
"""
