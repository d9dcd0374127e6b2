"""Hardware helpers every backend may use: PCI functions and topology (:mod:`.pci`), RDMA NICs and
their PCIe path to a device (:mod:`.nics`), and the cloud provider and placement of the host
(:mod:`.cloud`, :mod:`.aws_topology`). Public to vendors; documented in ``docs/vendors.md``."""
