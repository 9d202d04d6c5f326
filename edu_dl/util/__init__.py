"""Shared utilities below every tool: worker processes, argparse types, progress bars.

- ``worker``: run a function in a worker process, with a time limit and a typed reply
- ``args``: argparse types (positive numbers, comma lists)
- ``progress``: one rule for when tqdm bars are shown
- ``tables``: aligned text tables and Markdown tables (``edu-dl doctor`` and every benchmark)
- ``units``: bytes in binary units
"""
