"""mytorch: the deep-learning framework you build across the course's exercises.

Each module says which exercise fills it in, and each function of yours that is not written yet
raises NotImplementedError naming itself, so a later exercise that needs it says which piece to
write first:

- ``graph.py`` (exercise 07): ``topological_order``;
- ``tape.py`` (exercise 08): ``unbroadcast``, the ``Tape``'s ops with their VJPs, ``backward``;
- ``functional.py`` (exercise 08): ``softmax_cross_entropy``;
- ``nn.py`` (exercise 10): ``Linear``, ``cross_entropy`` on a tape, ``SGD``, ``train_step``;
- ``conv.py`` (exercise 11): ``im2col_dilated``, a convolution's forward and backward passes,
  ``Conv2d`` on a tape;
- ``plan.py`` (exercise 12): ``plan``, and ``schedule`` with your topological order;
- ``attention.py`` (exercise 18): ``attention_backward``, and ``attention`` on a tape;
- exercise 24 (the capstone) trains a classifier of your design with all of it.

Keep this folder beside your exercise notebooks: ``edu-dl validate`` and the grader read it with
each notebook that imports it (only its ``.py`` files).
"""
