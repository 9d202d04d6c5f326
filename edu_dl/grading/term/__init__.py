"""The term: a batch graded (``batch.grade``), validated (``validate``), its gradebooks
(``gradebook``, ``csvio``, ``report``), what a person decides (``manual``: hand grades and
overrides; ``policy``: due dates, late days, the roster), the class at a glance (``classreport``),
the learning-management systems (``lms/``) and the commands (``cli``, ``assign``).

The top room: it drives the stages and never runs below them. Issue 40's gradebook database,
hand-grading page and configuration belong here.
"""
