"""Where the tests' own files are: the repository, the vendored vectors, the examples."""

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
VECTORS = TESTS / "vectors"
REFERENCE = VECTORS / "reference"
EXAMPLE = REPO / "examples" / "codebase-brief"
