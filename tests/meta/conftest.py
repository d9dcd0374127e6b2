"""The suite's own tests run pytest inside pytest."""

pytest_plugins = ["pytester"]
