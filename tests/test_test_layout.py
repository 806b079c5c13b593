"""The test tree itself: pytest's default import mode ("prepend", no __init__.py files) imports every
test file as a top-level module named after its basename, so two files with the same name in different
folders stop the whole collection ("import file mismatch"): the names must be unique."""

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_test_file_basenames_are_unique():
    names = Counter(path.name for path in TESTS.rglob("test_*.py") if "__pycache__" not in path.parts)
    assert [name for name, count in names.items() if count > 1] == []
