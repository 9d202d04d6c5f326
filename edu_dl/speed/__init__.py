"""The speed tasks' one home, below both the exercises' harness and the grader (issue 42).

``tasks`` holds each open-ended task ("the same answer, N times less CPU time"): its slow
reference, the inputs of one call, its goal and the gradebook row it gets. The harness shows a
student's indicative ratio from here and the grader measures the real one from here, so neither
imports the other for it.
"""
