"""Notebook tooling: helpers every lecture calls, and the tools that execute and host notebooks.

- ``lecture``: ``setup()``, quiet TensorFlow, plot style, GPU fallbacks, recorded results
- ``run``: ``python -m edu_dl.notebook.run`` executes notebooks and records their sources' digests
- ``hosted``: the install cell for hosted notebooks (Colab, Kaggle)
- ``measured``: timings taken in turns, and the sentence a lecture prints from them (a ranking
  only where the spread allows one)
- ``profiler_text``: a profiler table recorded as text, read by its header
"""
