"""``edu-dl mark OUT``: grading by hand in a browser, on a local Jupyter Server extension.

``store`` is the sheet (the rows a person grades, read from OUT's gradebook, and the filled-in
sheet they are saved to, in manual.csv's own format); ``app`` serves it (handlers, the
extension, the command); ``page`` is the page itself.
"""
