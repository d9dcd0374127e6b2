"""The vendor backend example (docs/vendors.md's ``python`` block, shown again in README.md): the
one rule on its length, which tests/meta/test_readme.py and tests/conformance/test_vendor_docs.py
both check."""

# "About 30 lines": what a new vendor copies stays readable at a glance.
MAX_EXAMPLE_LINES = 40


def example_lines(code: str) -> int:
    """Lines of an example block, blank lines at either end not counted."""
    return len(code.strip().splitlines())
