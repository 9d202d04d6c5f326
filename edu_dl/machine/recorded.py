"""Results recorded on other machines: benchmarks/gpu/<device>/, each with its PROVENANCE.

``edu-dl bench gpu`` writes them (``edu_dl.bench.record``); the lectures read them back here to
show a GPU's numbers on a machine without one, labelled with the device and the date.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]  # the repository: edu_dl/machine/recorded.py
BENCHMARKS = ROOT / "benchmarks"
PROVENANCE = "PROVENANCE"


def read_provenance(folder: Path) -> dict[str, str]:
    """The ``key: value`` lines of ``folder/PROVENANCE`` ('#' lines are comments)."""
    facts: dict[str, str] = {}
    path = folder / PROVENANCE
    if not path.is_file():
        return facts
    for line in path.read_text(encoding="utf-8").splitlines():
        key, sep, value = line.partition(":")
        if sep and not line.startswith("#"):
            facts[key.strip()] = value.strip()
    return facts


def recorded(benchmark: str, device: str | None = None, root: Path = BENCHMARKS
             ) -> dict[str, Any]:
    """A recorded GPU result: {'data': its JSON, 'provenance': {...}, 'folder': Path}.

    ``device``: a folder name under benchmarks/gpu/ (default: the only or first one).
    """
    folders = sorted(p for p in (root / "gpu").glob("*") if (p / PROVENANCE).is_file())
    if device is not None:
        folders = [p for p in folders if p.name == device]
    if not folders:
        raise FileNotFoundError(f"no recorded GPU results under {root / 'gpu'}"
                                + (f" for {device!r}" if device else ""))
    path = folders[0] / benchmark / f"{benchmark}.json"
    return {"data": json.loads(path.read_text(encoding="utf-8")),
            "provenance": read_provenance(folders[0]), "folder": folders[0]}
