"""botocore's IMDS switches: ``AWS_EC2_METADATA_DISABLED`` and ``AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE``.

Semantics and precedence follow botocore (``botocore/utils.py`` ``InstanceMetadataFetcher``:
disabled first, then an explicit endpoint, then the endpoint mode; IPv6 endpoint
``http://[fd00:ec2::254]``). Real loopback fakes, the trn2.48xlarge snapshot through the CLI.
"""

from __future__ import annotations

import json

import pytest

from ray_accel_ext.errors import MetadataDisabled, MetadataServerError
from ray_accel_ext.host import Deadline
from ray_accel_ext.host.metadata import IMDS_IPV6_ENDPOINT, MetadataClient
from ray_accel_ext.testing.fake_metadata import FakeImds
from ray_accel_ext.testing.snapshots import serve_snapshot
from ray_accel_ext.tools.cli import main
from tests.support.paths import HOSTS

TRN2 = HOSTS / "neuron" / "trn2-48xlarge"


@pytest.mark.parametrize("value", ["true", "TRUE", " True "])
def test_disabled_sends_nothing_and_says_why(value):
    with FakeImds({"instance-type": "trn2.48xlarge"}) as srv:
        md = MetadataClient({**srv.env(), "AWS_EC2_METADATA_DISABLED": value}, Deadline(2.0))
        with pytest.raises(MetadataDisabled, match="AWS_EC2_METADATA_DISABLED"):
            md.imds("instance-type")
        assert srv.requests == [] and md.calls == 0


@pytest.mark.parametrize("value", ["false", "0", ""])
def test_anything_but_true_leaves_it_on(value):
    # botocore compares the lower-cased value with "true" only
    with FakeImds({"instance-type": "trn2.48xlarge"}) as srv:
        md = MetadataClient({**srv.env(), "AWS_EC2_METADATA_DISABLED": value}, Deadline(2.0))
        assert md.imds("instance-type") == "trn2.48xlarge"


def test_ipv6_mode_picks_the_ipv6_endpoint():
    # A snapshot host never asks the real link-local servers, so the refusal names the endpoint
    # the live machine would have asked.
    md = MetadataClient({"AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE": "IPv6"}, Deadline(1.0), live=False)
    with pytest.raises(MetadataServerError, match=r"\[fd00:ec2::254\]"):
        md.imds("instance-type")
    assert IMDS_IPV6_ENDPOINT == "http://[fd00:ec2::254]"


def test_bad_mode_is_a_clear_error():
    md = MetadataClient({"AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE": "ipv5"}, Deadline(1.0))
    with pytest.raises(MetadataServerError, match="must be IPv4 or IPv6"):
        md.imds("instance-type")
    assert md.calls == 0


def test_explicit_endpoint_wins_over_the_mode():
    with FakeImds({"instance-type": "p5.48xlarge"}) as srv:
        md = MetadataClient({**srv.env(), "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE": "IPv6"}, Deadline(2.0))
        assert md.imds("instance-type") == "p5.48xlarge"


def test_an_ipv6_endpoint_literal_is_reached():
    class FakeImds6(FakeImds):
        host = "::1"

    try:
        srv = FakeImds6({"instance-type": "p5.48xlarge"}).start()
    except OSError as exc:  # a host without IPv6 loopback
        pytest.skip(f"no IPv6 loopback here: {exc}")
    with srv:
        assert srv.url.startswith("http://[::1]:")
        md = MetadataClient({"AWS_EC2_METADATA_SERVICE_ENDPOINT": srv.url}, Deadline(2.0))
        assert md.imds("instance-type") == "p5.48xlarge"


def test_cli_on_an_ec2_node_with_metadata_disabled(capsys, monkeypatch):
    """Discovery still describes the devices (the instance type comes from DMI); the zone is
    missing, and doctor names the variable as the cause, as a warning."""
    with serve_snapshot(TRN2) as env:
        monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", env["AWS_EC2_METADATA_SERVICE_ENDPOINT"])
        monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        assert main(["ray-args", "--root", str(TRN2), "--format", "json"]) == 0
        spec = json.loads(capsys.readouterr().out)
        assert spec["resources"]["neuron_cores"] == 64
        assert "rayaccel.io/zone" not in spec["labels"]
        main(["doctor", "--root", str(TRN2), "--format", "json"])
        findings = json.loads(capsys.readouterr().out)["findings"]
    disabled = [f for f in findings if f["cause"] == "metadata-disabled"]
    assert disabled and disabled[0]["severity"] == "warning", findings
    assert "AWS_EC2_METADATA_DISABLED" in disabled[0]["fix"]
