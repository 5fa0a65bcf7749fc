"""Makes the crafted-row helpers beside these tests (``qrows``) importable."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
