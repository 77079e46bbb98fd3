"""Shared bits of the benchmark scripts: import path and JSON-line output."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def emit(obj: dict) -> None:
    print(json.dumps(obj), flush=True)
