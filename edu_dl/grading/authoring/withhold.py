"""What the gradebook may say about a hidden case: shapes, kinds, counts and the hint, no value.

The grader alone decides which cases are hidden (``judge`` counts the visible ones it drew);
for those, ``spec.judge_case`` passes the comparison's message through :func:`withheld`. It is
a whitelist: the message is rebuilt from fixed templates, copying only shapes, dtype and type
names and counts of entries. Values of the inputs, of the expected result and of the student's
result, and errors derived from them (max abs/rel error), are never copied. Any message it does
not recognise (a part's own ``compare`` or ``result_check``, two scalars that differ, a failed
comparison's exception) becomes a sentence with no value in it, so a new message shape in
``spec.compare_arrays`` is withheld until it is added here, never leaked.
"""

from __future__ import annotations

import re

SHAPE = r"\(\d*(?:, \d+)*,?\)"  # (), (3,), (3, 4)
DTYPE = r"[\w<>|=]+"  # float64, <U5, |S3
NAME = r"[A-Za-z_]\w*"  # a type's name

# Messages of spec.compare_arrays / default_compare that hold no value: kept as they are.
VALUE_FREE = [re.compile(p) for p in (
    rf"expected shape {SHAPE}, got shape {SHAPE}",
    rf"expected \w+ values \({DTYPE}\), got \w+ \({DTYPE}\)",
    rf"expected an array of shape {SHAPE}, got a {NAME}",
    rf"expected a tuple of \d+ outputs, got a {NAME}",
    r"expected \d+ outputs, got \d+",
    r"the result holds \d+ values where \d+ are expected; not compared",
)]
NOT_AN_ARRAY = re.compile(rf"(got a {NAME} that is not an array) \(")  # its exception: dropped
ENTRIES = re.compile(r"(\d+ of \d+ entries differ)(; got contains \d+ inf/nan)?")
OUTPUT = re.compile(r"output (\d+): (.*)", re.DOTALL)
WITHHELD = "the result is not the expected one (for a hidden case only shapes and counts are shown)"


def withheld(message: str) -> str:
    """A comparison's message for a hidden case: what it says about shapes, kinds and counts."""
    nested = OUTPUT.fullmatch(message)
    if nested:
        return f"output {nested[1]}: {withheld(nested[2])}"
    if any(p.fullmatch(message) for p in VALUE_FREE):
        return message
    not_array = NOT_AN_ARRAY.match(message)
    if not_array:
        return not_array[1]
    entries = ENTRIES.match(message)  # the errors and the differing entries after it: dropped
    if entries:
        return entries[1] + (entries[2] or "")
    return WITHHELD


ERROR_TYPE = re.compile(r"([A-Za-z_][\w.]*)(?::|$)")
WHERE = re.compile(r"\s+at (line \d+ in [\w<>.]+)")


def withheld_error(text: str) -> str:
    """What a hidden case raised: the exception's type and the student's line number, not its
    message (``IndexError: index 12345 is out of bounds`` would give an input away)."""
    lines = str(text).splitlines() or [""]
    kind = ERROR_TYPE.match(lines[0])
    where = next((m[1] for m in map(WHERE.match, lines[1:]) if m), "")
    said = f"{kind[1] if kind else 'an error'} (its message is not shown for a hidden case)"
    return f"{said}, at {where}" if where else said
