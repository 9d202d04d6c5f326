"""``edu-dl bench ...``: the benchmarks, one module each, on one worker protocol.

- ``worker``: one way to run a measurement in a fresh process (deadline, errors, stderr tail)
- ``args``: the argparse types (imports nothing else of the package)
- ``report``: the one harness (a ``Benchmark`` declares its flags, its measure function and its
  files; its ``Report`` is written by one writer: Markdown, CSV, JSON, PNG) and the table renderers
- ``common``: the shared flags (``--out DIR`` is always a folder), formats, timers, machine facts
- ``device``: ``--device cpu|gpu``: the array namespace, device names and synchronize
- ``problems``: the two-layer net at named sizes, drawn by ``edu_dl.models.spec``
- ``engine`` (with ``trainers``: the twins' own steps) and ``plan``: one training step per
  framework; the static plan
- ``matmul``, ``kernels``, ``transfer``, ``loader``, ``twins``, ``parallel``
- ``record``: ``bench gpu`` (``make bench-gpu``), ``bench results`` (benchmarks/RESULTS.md) and
  ``recorded()``, how a lecture reads a recorded GPU result
- ``cli``: the ``edu-dl bench`` parser

Nothing is imported here, so a module that needs only ``worker`` or ``args`` stays light.
"""
