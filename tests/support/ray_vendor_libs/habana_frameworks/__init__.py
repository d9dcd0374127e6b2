"""Stand-in for the Habana software stack's top-level package (see ../README.md)."""
