"""One submission, stage by stage: what ``edu-dl grade`` does to each notebook.

``load`` (the source's parts) and ``collect`` (who answered what), ``secret`` (the inputs drawn
for everyone), ``restore`` and ``prepare`` (the notebook rebuilt from the source), ``run`` (in its
sandbox), ``receive`` (what came back, read strictly), ``judge`` (outside the sandbox),
``feedback`` (the page), ``replay`` (a disputed row again); the speed tasks timed from outside
(``speed``, ``speed_rows``) and the same stages on a Dask cluster (``cluster``). The term's
``batch`` runs them for a whole folder.
"""
