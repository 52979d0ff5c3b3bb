"""The vendored NIP-44 vector file, read as JSON (never ../shared: the copy under tests/vectors)."""

from __future__ import annotations

import json
from typing import Any

from tests.support.paths import VECTORS


def load_vectors(name: str) -> Any:
    return json.loads((VECTORS / name).read_text(encoding="utf-8"))
