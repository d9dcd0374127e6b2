"""The host seam: the only code that touches the operating system.

Backends read files, environment variables, cloud metadata, external tools and libraries only
through a :class:`Host` (:mod:`.protocol`). Three kinds exist, all :class:`FsHost` (:mod:`.fs`):

* the live host (root ``/``): the real machine;
* a root directory (``RAY_ACCEL_ROOT=DIR`` or ``--root DIR``), like hwloc's ``HWLOC_FSROOT``:
  ``/sys``, ``/proc``, ``/dev`` are read from ``DIR/sys`` ... and nothing outside ``DIR``;
* a host snapshot (:mod:`.snapshot`, the format): ``rootfs/`` plus the recorded environment,
  library readings and tool output; tests serve its cloud metadata from loopback servers.

:mod:`.metadata` holds the GCE and EC2 clients; :mod:`.recording` writes snapshots
(``ray-accel record``). Vendors use :class:`Host`, :func:`open_host` and the errors it raises.
"""

from .fs import FsHost, host_from_env, open_host
from .metadata import MetadataClient
from .protocol import (
    BUDGET_ENV,
    DEFAULT_BUDGET_S,
    MAX_READ_BYTES,
    PASSTHROUGH_ENV,
    ROOT_ENV,
    Deadline,
    Host,
)
from .snapshot import is_snapshot_dir

__all__ = [
    "Host",
    "FsHost",
    "Deadline",
    "MetadataClient",
    "host_from_env",
    "open_host",
    "is_snapshot_dir",
    "ROOT_ENV",
    "BUDGET_ENV",
    "DEFAULT_BUDGET_S",
    "MAX_READ_BYTES",
    "PASSTHROUGH_ENV",
]
