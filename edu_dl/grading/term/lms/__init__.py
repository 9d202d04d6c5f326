"""Canvas and Moodle: their submission downloads in, their gradebook imports out.

- ``formats``: how each names a submission's files (a regex with named groups) and a
  resubmission (``-1``, ``-2``).
- ``roster``: the course roster with the LMS's ids (canvas_id, sis_user_id, sis_login_id,
  section, id_number) beside nbgrader's columns.
- ``metadata``: submission times (and ids) from the LMS's own exports, never from a submission.
- ``collect``: a download (zip or folder, read behind ``trust.archive``) into the nbgrader layout
  ``edu-dl grade`` reads.
- ``export``: grades.csv as Canvas's gradebook-import CSV or Moodle's grade-import CSV.
- ``cli``: ``edu-dl lms collect|export canvas|moodle ...``.
"""
