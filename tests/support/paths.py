"""Where things are, for every test: the repository, the tests, the recorded host snapshots."""

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
HOSTS = TESTS / "data" / "hosts"
ARTIFACTS = REPO / "artifacts"
