"""Text a student wrote, made safe for every place the grader writes it.

A student controls exception messages, printed output, file names (undecodable bytes arrive as
lone surrogates) and cell sources. None of it may stop a writer (a lone surrogate makes a strict
UTF-8 encoder raise), drive a terminal (escape sequences clear a screen, forge a line, set the
clipboard) or become markup in a page. Every writer passes such text through one function here:

- :func:`visible`: any string as valid Unicode; each lone surrogate becomes ``\\xNN`` (the byte
  a file name held) or ``\\udNNN``. For files: CSV, JSON state, Markdown and HTML bodies.
- :func:`for_terminal`: :func:`visible`, and every control character but newline and tab,
  every bidirectional override and every invisible character (zero-width, no-break and other
  odd spaces, soft hyphen, variation selectors, tags), written as an escape (``\\x1b``,
  ``\\u202e``, ``\\u200b``): two names that look the same are shown different.
- :func:`for_markdown`: :func:`for_terminal`, then HTML-escaped, with table pipes and newlines
  made harmless: the text of one Markdown table cell.
"""

from __future__ import annotations

import html
import re
import sys
from typing import TextIO

SURROGATE = re.compile("[\ud800-\udfff]")
# C0 and C1 controls and DEL (but newline and tab), and the bidirectional controls that reorder
# what a reader sees (a "trojan source" line).
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# What a reader cannot see or tell from a plain space: "alice\u200b" and "alice\xa0" would pass
# for "alice" in a gradebook. Unicode's default-ignorable code points and its odd spaces.
INVISIBLE = re.compile("[\xa0\xad\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u2000-\u200d"
                       "\u2028\u2029\u202f\u205f-\u2065\u206a-\u206f\u3000\u3164\ufe00-\ufe0f"
                       "\ufeff\uffa0\ufff0-\ufff8\U000e0000-\U000e0fff]")
SHOWN_AS_ESCAPE = re.compile(f"{CONTROL.pattern}|{INVISIBLE.pattern}")


def _surrogate(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    # surrogateescape maps an undecodable byte b to U+DC00 + b (b >= 0x80)
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def _control(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    return (f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}" if code <= 0xFFFF
            else f"\\U{code:08x}")


def visible(text: object) -> str:
    """``text`` as a string that encodes as UTF-8, lone surrogates written as escapes."""
    text = text if isinstance(text, str) else str(text)
    return SURROGATE.sub(_surrogate, text)


def for_terminal(text: object) -> str:
    """``text`` safe to print: control and invisible characters (but newline and tab) as
    escapes."""
    return SHOWN_AS_ESCAPE.sub(_control, visible(text))


def say(text: object, file: TextIO | None = None) -> None:
    """Print for a person at a terminal (stdout unless ``file``): whatever a student wrote
    into ``text`` (a name, an exception) is shown with its control characters escaped."""
    print(for_terminal(text), file=file or sys.stdout)


def say_to_stderr(text: object) -> None:
    """:func:`say` on stderr: the batch's log."""
    say(text, sys.stderr)


def for_markdown(text: object) -> str:
    """``text`` as the body of one Markdown table cell: no markup, no pipes, no newlines."""
    return html.escape(for_terminal(text)).replace("|", "\\|").replace("\n", "<br>")
