"""The py-wacz validator of the test extra, run on a crawler's WACZ."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

WACZ = str(Path(sys.executable).parent / "wacz")


def wacz_validate(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([WACZ, "validate", "-f", str(path)], capture_output=True, text=True)
