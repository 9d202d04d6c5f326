"""A student's solution cell reduced to what two identical answers share, within bounds.

The class report lists solution cells that several students submitted identically once
comments, blank lines and spacing are removed (``classreport``). The cell's text is the
student's: it is never executed or parsed as Python here, only split into tokens by
``tokenize`` (a pure lexer), with a bound on its length and on the tokens kept. What leaves this
module is a digest and a token count: no text of the student's.
"""

from __future__ import annotations

import hashlib
import io
import tokenize
from dataclasses import dataclass

MAX_CELL = 100_000  # characters: a longer cell is not compared (trust.source's bound)
MAX_TOKENS = 20_000
MIN_TOKENS = 12  # shorter answers are alike by nature ("return x.T"), never listed
DROPPED = frozenset({tokenize.COMMENT, tokenize.NL, tokenize.ENCODING, tokenize.ENDMARKER})


@dataclass(frozen=True)
class CellPrint:
    """A normalized cell: the digest of its tokens and how many there are."""

    digest: str
    tokens: int


def normalized_tokens(source: str) -> list[str] | None:
    """The cell's tokens without comments, blank lines or spacing (indentation kept as
    INDENT/DEDENT, so only its depth counts, not its width); None when the cell is over the
    bounds. Text the lexer cannot split (an unclosed string, a shell escape) falls back to its
    non-blank lines with runs of spaces made one."""
    if len(source) > MAX_CELL:
        return None
    tokens: list[str] = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type in DROPPED:
                continue
            if len(tokens) >= MAX_TOKENS:
                return None
            tokens.append({tokenize.NEWLINE: "\n", tokenize.INDENT: "<indent>",
                           tokenize.DEDENT: "<dedent>"}.get(token.type, token.string))
    except (tokenize.TokenError, SyntaxError, ValueError):
        tokens = [word for line in source.splitlines()
                  if not line.lstrip().startswith("#") for word in line.split()]
        if len(tokens) > MAX_TOKENS:
            return None
    while tokens and tokens[-1] in ("\n", "<dedent>"):
        tokens.pop()
    return tokens


def cell_print(source: str) -> CellPrint | None:
    """The normalized cell's digest and size, or None when it is over the bounds."""
    tokens = normalized_tokens(source)
    if tokens is None:
        return None
    digest = hashlib.sha256("\0".join(tokens).encode("utf-8", "surrogatepass")).hexdigest()
    return CellPrint(digest[:32], len(tokens))
