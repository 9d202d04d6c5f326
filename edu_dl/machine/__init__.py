"""This machine: what it is, what it can do at best, and which GPUs each framework sees.

- ``hardware``: CPU and memory facts, theoretical peaks and measured rates
- ``probes``: which GPUs NumPy/CuPy, PyTorch and TensorFlow each see, probed in worker processes
- ``doctor``: ``edu-dl doctor``, the table of both
"""
