"""The reliability suite: its helpers (``faultkit``) are importable from its tests and from
``bench/reliability.py``, which runs the long versions."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
