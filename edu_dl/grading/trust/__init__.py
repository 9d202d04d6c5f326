"""The trust boundary: every byte a student or a sandbox wrote is read here, and only here.

One rule for all of it: parse strictly, bound size and nesting depth, and never raise past the
student it belongs to (a failure becomes that student's row, with a status that says why).

- ``archive``: a Canvas or Moodle submissions download (a zip or an unpacked folder), member by
  member, bounded; a bad member costs its own line, a bad archive its own lines.
- ``files``: the submissions folder (names, notebooks, ``timestamp.txt``), read bounded and
  never through a link.
- ``notebook``: a submitted notebook as data.
- ``result``: what a sandbox returns (the result zip, its run record, its arrays).
- ``source``: the text of a student's cells, parsed for the function a part checks.
- ``errors``: a cell's recorded error, and the earlier failed cell that caused a NameError.
"""
