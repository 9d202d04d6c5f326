"""Exercise 5, autograd from scratch: how its parts call and judge a student's function.

Nothing to hold here, and nothing computes an answer: every part calls the function plainly,
compares by ``tolerance(...)`` and checks its source by ``names_check(...)`` (data), and its
hints are generic rules (``edu_dl.grading.hints``) or mistake replays, which stay in the course's
private part file with the oracles (central differences, ``torch.autograd`` for relu).
"""
