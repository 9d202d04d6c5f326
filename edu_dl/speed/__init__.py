"""Open-ended speed tasks: a slow reference, a goal ratio, and the inputs a timed run uses.

The grade is measured from outside the student's code (:mod:`edu_dl.grading.speed`); what this
package offers the notebook is the reference and an indicative ratio for ``check()``.
"""
