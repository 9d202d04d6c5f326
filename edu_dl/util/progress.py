"""One rule for progress bars: shown unless the caller turns them off or TQDM_DISABLE is set.

tqdm reads TQDM_DISABLE only when ``disable=`` is not passed, and our commands pass it (for
``--no-progress``), so they ask here. Notebook tests set TQDM_DISABLE=1: bars print rates.
"""

from __future__ import annotations

import os


def progress_disabled(enabled: bool = True) -> bool:
    """The value for tqdm's ``disable=``: True when not enabled or when TQDM_DISABLE is set."""
    return not enabled or os.environ.get("TQDM_DISABLE", "").lower() not in ("", "0", "false")
