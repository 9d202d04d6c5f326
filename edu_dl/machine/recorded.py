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


def session_facts(facts: dict[str, str], benchmark: str) -> dict[str, str]:
    """``facts`` as they hold for ``benchmark``: a PROVENANCE that gathers recordings made in
    different sessions names a later session's own facts with the benchmark in front
    (``memory_probe date: 2026-11-25``); for that benchmark they replace the folder's
    (``date``). The other lines stay as they are."""
    prefix = f"{benchmark} "
    own = {key[len(prefix):]: value for key, value in facts.items() if key.startswith(prefix)}
    return {**facts, **own}


def _data_file(folder: Path, benchmark: str) -> Path:
    """``folder/<benchmark>.json``, or else the folder's only JSON file (a probe names its own)."""
    named = folder / f"{benchmark}.json"
    if named.is_file():
        return named
    found = sorted(folder.glob("*.json"))
    if len(found) != 1:
        raise FileNotFoundError(f"no {named.name} in {folder}, and not one other JSON file to "
                                f"read instead (found {[p.name for p in found]})")
    return found[0]


def recorded(benchmark: str, device: str | None = None, root: Path = BENCHMARKS
             ) -> dict[str, Any]:
    """A recorded GPU result: {'data': its JSON, 'provenance': {...}, 'folder': Path,
    'files': Path}.

    Where ``edu-dl bench gpu`` writes: ``benchmarks/gpu/<device>/<benchmark>/``, the PROVENANCE
    in the device folder (``folder``; ``device``: a folder name under benchmarks/gpu/, default the
    first, in name order, that holds ``benchmark``). A probe recorded on its own may instead sit in
    ``benchmarks/<benchmark>/<device>/`` with its PROVENANCE beside it (then ``folder`` is that
    folder). ``files`` is the folder of the data and of the files recorded with it; the data is
    ``<benchmark>.json`` there, or the only JSON file there. ``provenance`` holds the facts as
    they hold for this benchmark (``session_facts``).
    """
    folders = sorted(p for p in (root / "gpu").glob("*") if (p / PROVENANCE).is_file())
    if device is not None:
        folders = [p for p in folders if p.name == device]
    holding = [p for p in folders if (p / benchmark).is_dir()]
    if holding:
        folder, files = holding[0], holding[0] / benchmark
    else:
        probes = sorted(p for p in (root / benchmark).glob("*") if (p / PROVENANCE).is_file())
        if device is not None:
            probes = [p for p in probes if p.name == device]
        if not probes:
            raise FileNotFoundError(f"no recorded GPU result {benchmark!r} under {root / 'gpu'}"
                                    f" or {root / benchmark}"
                                    + (f" for {device!r}" if device else ""))
        folder = files = probes[0]
    path = _data_file(files, benchmark)
    return {"data": json.loads(path.read_text(encoding="utf-8")),
            "provenance": session_facts(read_provenance(folder), benchmark), "folder": folder,
            "files": files}
