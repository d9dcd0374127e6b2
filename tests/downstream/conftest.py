"""Downstream packages are separate projects with their own pytest configuration.

They are pip-installed and tested from their own directory by ``ci/conformance.sh`` (like
pluggy's ``downstream/``), never collected by this repository's own test run.
"""

collect_ignore = ["ray_accel_ext_acme"]
