"""Stand-in for ``habana_frameworks.torch`` (the real one imports PyTorch; see ../../README.md)."""
