"""The ``ray-accel`` command (:mod:`.cli`), its subcommands (:mod:`.commands`), ``doctor`` and
``record``."""
