"""The pci.ids reader: format, bounds, the host's own file under a root."""

from __future__ import annotations

from pathlib import Path

import pytest

from ray_accel_ext.skus import pciids

PINNED = Path(__file__).parents[1] / "data" / "pci.ids"

# A small file in the format of the PCI ID Repository's header (https://pci-ids.ucw.cz/).
SAMPLE = """\
#
#\tVersion: 2099.01.02
#\tDate:    2099-01-02 03:04:05
#
10de  NVIDIA Corporation
\t2330  GH100 [H100 SXM5 80GB]
\t\t10de 16c1  H100 SXM5 80GB
\t25b6  GA107GL [A2 / A16]
\t\t10de 14a9  A16
\t\t10de 157e  A2
this line is not pci.ids
1002  Advanced Micro Devices, Inc. [AMD/ATI]
\t74a1  Aqua Vanjaram [Instinct MI300X]
\tzzzz  not a device line
C 03  Display controller
\t02  3D controller
"""


def test_sample_vendors_devices_subsystems():
    parsed = pciids.parse(SAMPLE)
    assert (parsed.version, parsed.date) == ("2099.01.02", "2099-01-02 03:04:05")
    assert parsed.vendor_names["0x10de"] == "NVIDIA Corporation"
    assert parsed.name("0x10de", "0x2330") == "GH100 [H100 SXM5 80GB]"
    assert parsed.name("10DE", "25b6", ("0x10de", "0x157e")) == "A2"
    assert parsed.name(0x10DE, 0x25B6, ("0x10de", "0x9999")) == "GA107GL [A2 / A16]"
    assert parsed.device("0x1002", "0x74a1").name == "Aqua Vanjaram [Instinct MI300X]"
    assert parsed.name("0x10de", "0x9999") is None
    # the stray text line and the malformed device line are skipped and counted, not fatal
    assert parsed.skipped_lines == 2
    # the class section ends the vendor list: "03" is not read as a vendor
    assert "0x0003" not in parsed.vendor_names


def test_vendor_filter_keeps_only_those_vendors():
    parsed = pciids.parse(SAMPLE, vendors=["0x1002"])
    assert list(parsed.vendor_names) == ["0x1002"]
    assert parsed.device("0x10de", "0x2330") is None
    assert [d.device_id for d in parsed.vendor_devices("1002")] == ["0x74a1"]


def test_over_long_line_is_skipped():
    parsed = pciids.parse("10de  NVIDIA\n\t" + "2330  " + "x" * 5000 + "\n\t2331  GH100 [H100 PCIe]\n")
    assert parsed.device("0x10de", "0x2330") is None
    assert parsed.name("0x10de", "0x2331") == "GH100 [H100 PCIe]"
    assert parsed.skipped_lines == 1


def test_pinned_file_parses_with_its_version_and_known_names():
    parsed = pciids.load(PINNED)
    assert parsed.version == "2026.08.22" and parsed.date.startswith("2026-08-22")
    assert parsed.skipped_lines == 0
    assert parsed.name("0x10de", "0x2330") == "GH100 [H100 SXM5 80GB]"
    assert parsed.name("0x10de", "0x1db8", ("0x10de", "0x131d")) == "Tesla V100-SXM3-32GB-H"
    assert parsed.name("0x1d0f", "0x7364") == "NeuronDevice (Trainium2)"


def test_missing_and_oversized_files_raise_naming_the_path(tmp_path):
    with pytest.raises(pciids.PciIdsError, match="nope.ids: cannot read"):
        pciids.load(tmp_path / "nope.ids")
    big = tmp_path / "big.ids"
    big.write_bytes(b"#" * (pciids.MAX_BYTES + 1))
    with pytest.raises(pciids.PciIdsError, match="big.ids: larger than"):
        pciids.load(big)


def test_undecodable_bytes_are_replaced_not_fatal(tmp_path):
    path = tmp_path / "pci.ids"
    path.write_bytes(b"10de  NVIDIA \xff\xfe Corporation\n\t2330  GH100 [H100 SXM5 80GB]\n")
    assert pciids.load(path).name("0x10de", "0x2330") == "GH100 [H100 SXM5 80GB]"


def test_host_file_under_a_root_hwdata_first(tmp_path):
    assert pciids.host_pci_ids(tmp_path) is None
    assert pciids.host_device_name("0x10de", "0x2330", root=tmp_path) is None
    misc = tmp_path / "usr/share/misc/pci.ids"
    misc.parent.mkdir(parents=True)
    misc.write_text("10de  NVIDIA\n\t2330  from misc\n")
    assert pciids.host_device_name("0x10de", "0x2330", root=tmp_path) == "from misc"
    hwdata = tmp_path / "usr/share/hwdata/pci.ids"
    hwdata.parent.mkdir(parents=True)
    hwdata.write_text("10de  NVIDIA\n\t2330  from hwdata\n")
    assert pciids.host_pci_ids(tmp_path) == hwdata
    assert pciids.host_device_name("0x10de", "0x2330", root=tmp_path) == "from hwdata"


@pytest.mark.parametrize("raw, want", [("10de", "0x10de"), ("0x10DE", "0x10de"), (0x1AE0, "0x1ae0"), (" 27 ", "0x0027")])
def test_norm_id(raw, want):
    assert pciids.norm_id(raw) == want


@pytest.mark.parametrize("raw", ["", "0x12345", "zz", -1, 0x10000, None, True])
def test_norm_id_rejects(raw):
    with pytest.raises(ValueError):
        pciids.norm_id(raw)
