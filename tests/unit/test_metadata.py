"""Metadata clients against real loopback servers: timeouts, 429 Retry-After, 5xx, IMDSv2 tokens."""

from __future__ import annotations

import time

import pytest

from ray_accel_ext.errors import (
    MetadataRateLimited,
    MetadataServerError,
    MetadataTimeout,
)
from ray_accel_ext.host import Deadline
from ray_accel_ext.host.metadata import MetadataClient
from ray_accel_ext.testing.fake_metadata import FakeGceMetadata, FakeImds

KEY = "instance/attributes/accelerator-type"
INSTANCE = "instance/"  # every instance/ key is answered by one recursive read of this directory


def client(server, budget_s=3.0, timeout_s=0.3):
    env = {**server.env(), "RAY_ACCEL_METADATA_TIMEOUT_S": str(timeout_s)}
    return MetadataClient(env, Deadline(budget_s))


def test_gce_answer_is_cached_and_needs_flavor_header():
    with FakeGceMetadata({KEY: "v6e-16"}) as srv:
        md = client(srv)
        assert md.gce_attribute("accelerator-type") == "v6e-16"
        assert md.gce_attribute("accelerator-type") == "v6e-16"
        assert md.gce_attribute("absent") is None  # absent from the directory: a plain GET's 404
        assert srv.count(INSTANCE) == 1 and md.calls == 1


def test_instance_keys_come_from_one_recursive_read_in_the_real_servers_spelling():
    values = {
        KEY: "v5p-16",
        "instance/attributes/tpu-env": "TOPOLOGY: '2x2x2'\n",
        "instance/machine-type": "projects/1/machineTypes/ct5p-hightpu-4t",
        "instance/network-interfaces/0/ip": "10.0.0.2",
        "instance/network-interfaces/1/ip": "10.1.0.2",
        "instance/id": "6331980990053453154",
        "instance/zone": "projects/1/zones/us-east5-a",
        "project/project-id": "example-project",
    }
    with FakeGceMetadata(values) as srv:
        md = client(srv)
        doc = md.gce_instance()
        assert doc["machineType"].endswith("ct5p-hightpu-4t") and doc["id"] == 6331980990053453154
        assert [n["ip"] for n in doc["networkInterfaces"]] == ["10.0.0.2", "10.1.0.2"]
        assert doc["attributes"]["tpu-env"].startswith("TOPOLOGY")
        for path, text in values.items():
            assert md.gce(path) == text, path
        assert md.gce("instance/network-interfaces/2/ip") is None
        assert srv.count(INSTANCE) == 1 and srv.count("project/project-id") == 1 and md.calls == 2


def test_gce_hang_is_bounded_and_later_keys_fail_fast():
    with FakeGceMetadata({KEY: "v4-8"}, faults={"*": {"hang": True}}) as srv:
        md = client(srv, timeout_s=0.3)
        started = time.monotonic()
        with pytest.raises(MetadataTimeout) as err:
            md.gce_attribute("accelerator-type")
        with pytest.raises(MetadataTimeout):
            md.gce_attribute("tpu-env")
        assert time.monotonic() - started < 2.0
        assert srv.count() == 1  # the second key did not spend the budget again
        assert err.value.endpoint.endswith("instance/?recursive=true")


def test_429_honours_retry_after_then_succeeds():
    with FakeGceMetadata({KEY: "v5p-16"}, faults={KEY: {"status": 429, "retry_after": "0.2", "times": 1}}) as srv:
        md = client(srv)
        started = time.monotonic()
        assert md.gce_attribute("accelerator-type") == "v5p-16"
        assert time.monotonic() - started >= 0.2
        assert srv.count(INSTANCE) == 2  # a fault on a key inside the directory fails the whole read


def test_429_with_retry_after_beyond_budget_fails_fast_with_the_hint():
    with FakeGceMetadata({KEY: "x"}, faults={KEY: {"status": 429, "retry_after": "30"}}) as srv:
        md = client(srv, budget_s=1.0)
        started = time.monotonic()
        with pytest.raises(MetadataRateLimited) as err:
            md.gce_attribute("accelerator-type")
        assert time.monotonic() - started < 0.5
        assert err.value.status == 429 and err.value.retry_after_s == 30.0
        assert err.value.to_dict()["layer"] == "provider"


def test_5xx_is_retried_a_bounded_number_of_times():
    with FakeGceMetadata({KEY: "x"}, faults={KEY: {"status": 503}}) as srv:
        md = client(srv)
        with pytest.raises(MetadataServerError) as err:
            md.gce_attribute("accelerator-type")
        assert srv.count(INSTANCE) == 3 and err.value.attempts == 3


def test_truncated_and_oversized_answers():
    with FakeGceMetadata({KEY: "v6e-16-and-more"}, faults={KEY: {"truncate": 3}}) as srv:
        with pytest.raises(MetadataServerError):
            client(srv).gce_attribute("accelerator-type")
    with FakeGceMetadata({KEY: "x"}, faults={KEY: {"oversize": 400_000}}) as srv, \
            pytest.raises(MetadataServerError, match="not JSON"):
        client(srv).gce_attribute("accelerator-type")
    with FakeGceMetadata({KEY: "x"}, faults={INSTANCE: {"oversize": 2_000_000}}) as srv, \
            pytest.raises(MetadataServerError, match="larger than 1048576"):
        client(srv).gce_attribute("accelerator-type")
    with FakeGceMetadata({"project/project-id": "p"}, faults={"project/project-id": {"oversize": 400_000}}) as srv, \
            pytest.raises(MetadataServerError, match="larger than 262144"):
        client(srv).gce("project/project-id")


def test_unreachable_server_is_a_server_error_not_a_hang():
    md = MetadataClient({"GCE_METADATA_HOST": "127.0.0.1:9"}, Deadline(2.0))
    with pytest.raises(MetadataServerError, match="ConnectionRefused"):
        md.gce_attribute("accelerator-type")


def test_imds_token_first_then_get():
    with FakeImds({"instance-type": "trn2.48xlarge"}) as srv:
        md = client(srv)
        assert md.imds("instance-type") == "trn2.48xlarge"
        assert md.imds("placement/region") is None
        assert [m for m, _ in srv.requests] == ["PUT", "GET", "GET"]


def test_imds_refusing_the_token_is_a_provider_error():
    with FakeImds({"instance-type": "trn1.32xlarge"}, faults={"api/token": {"status": 403}}) as srv:
        with pytest.raises(MetadataServerError) as err:
            client(srv).imds("instance-type")
        assert err.value.status == 403 and "api/token" in err.value.endpoint
