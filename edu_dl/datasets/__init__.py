"""Data sets the course makes on the machine (nothing is downloaded): ``mnist1d``."""
