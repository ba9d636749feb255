"""The code version written into manifests and ledger events."""

from __future__ import annotations

import subprocess
from functools import lru_cache
from pathlib import Path

from transit_release import __version__


@lru_cache(maxsize=1)
def code_version() -> str:
    """``<package version>+g<commit>`` (``.dirty`` if uncommitted changes), or the bare version."""
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
                                capture_output=True, text=True, timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return __version__
    return f"{__version__}+g{commit}" + (".dirty" if dirty else "")
