"""A loopback fake of the EC2 query API, faithful for ``DescribeInstanceTopology``.

Protocol (``ec2-2016-11-15``, botocore's ``ec2`` serializer): ``POST /`` with a form body
``Action=DescribeInstanceTopology&Version=2016-11-15&InstanceId.1=i-...``, signed with SigV4
(``Authorization: AWS4-HMAC-SHA256 Credential=<key id>/<date>/<region>/ec2/aws4_request, ...``).
The answer is XML (``<DescribeInstanceTopologyResponse>`` with ``instanceSet/item`` and
``networkNodeSet/item``); errors are ``<Response><Errors><Error><Code>`` documents. Only the
signature's presence and key id are checked, not the HMAC.

Faults (``faults`` by action name or ``"*"``): ``{"status": 403, "code": "UnauthorizedOperation"}``,
``{"status": 503, "code": "RequestLimitExceeded"}``, ``{"hang": true}``, ``{"delay_s": 0.5}``.

Point boto3 at it with :meth:`FakeEc2Api.env` (``RAY_ACCEL_EC2_API_ENDPOINT`` plus fake
credentials and region)::

    with FakeEc2Api({"i-0abc": {"InstanceType": "trn2u.48xlarge", "NetworkNodes": ["nn-1", "nn-2", "nn-3"]}}) as api:
        os.environ.update(api.env())
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

from ..host.protocol import EC2_API_ENDPOINT_ENV
from .loopback import LoopbackServer

__all__ = ["FakeEc2Api", "FAKE_ACCESS_KEY_ID", "FAKE_SECRET_ACCESS_KEY"]

FAKE_ACCESS_KEY_ID = "AKIAFAKEFAKEFAKEFAKE"
FAKE_SECRET_ACCESS_KEY = "fake/secret/key/for/loopback/tests/only0"
_NS = "http://ec2.amazonaws.com/doc/2016-11-15/"
_CRED_RE = re.compile(r"^AWS4-HMAC-SHA256 Credential=([^/]+)/\d{8}/([^/]+)/ec2/aws4_request,")
_FIELDS = (
    ("InstanceType", "instanceType"),
    ("GroupName", "groupName"),
    ("AvailabilityZone", "availabilityZone"),
    ("ZoneId", "zoneId"),
    ("CapacityBlockId", "capacityBlockId"),
)


class FakeEc2Api(LoopbackServer):
    """EC2 API on 127.0.0.1. ``instances`` maps instance ids to ``DescribeInstanceTopology`` fields
    (``InstanceType``, ``NetworkNodes``, ``CapacityBlockId``, ...)."""

    def __init__(
        self,
        instances: Mapping[str, Mapping[str, Any]] | None = None,
        faults: Mapping[str, Mapping[str, Any]] | None = None,
        *,
        region: str = "us-east-2",
        access_key_id: str = FAKE_ACCESS_KEY_ID,
    ) -> None:
        self.instances = {k: dict(v) for k, v in (instances or {}).items()}
        super().__init__(faults)
        self.region = region
        self.access_key_id = access_key_id
        self.requests: list[dict[str, list[str]]] = []

    name = "ec2"
    methods = ("POST",)

    def env(self) -> dict[str, str]:
        """Variables that point boto3 (through ``ray_accel_ext.hw.aws_topology``) at this fake."""
        return {
            EC2_API_ENDPOINT_ENV: self.url,
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": FAKE_SECRET_ACCESS_KEY,
            "AWS_DEFAULT_REGION": self.region,
        }

    # requests ----------------------------------------------------------------------------------

    def _send(self, h: BaseHTTPRequestHandler, status: int, body: str) -> None:
        data = body.encode()
        h.send_response(status)
        h.send_header("Content-Type", "text/xml;charset=UTF-8")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        try:
            h.wfile.write(data)
        except OSError:
            pass

    def _error(self, h: BaseHTTPRequestHandler, status: int, code: str, message: str) -> None:
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error>'
            f"<Code>{escape(code)}</Code><Message>{escape(message)}</Message>"
            f"</Error></Errors><RequestID>{secrets.token_hex(8)}</RequestID></Response>"
        )
        self._send(h, status, body)

    def _handle(self, h: BaseHTTPRequestHandler, method: str = "POST") -> None:
        length = int(h.headers.get("Content-Length") or 0)
        form = parse_qs(h.rfile.read(length).decode("utf-8", "replace"), keep_blank_values=True)
        with self._lock:
            self.requests.append(form)
        auth = _CRED_RE.match(h.headers.get("Authorization", ""))
        if not auth:
            self._error(h, 401, "AuthFailure", "AWS was not able to validate the provided access credentials")
            return
        if auth.group(1) != self.access_key_id:
            self._error(h, 401, "AuthFailure", "The access key ID is not known")
            return
        action = (form.get("Action") or [""])[0]
        fault = self._fault(action)
        if fault:
            if self._delay_or_hang(h, fault):
                return
            if fault.get("status"):
                self._error(h, int(fault["status"]), str(fault.get("code", "InternalError")), "injected fault")
                return
        if action != "DescribeInstanceTopology":
            self._error(h, 400, "InvalidAction", f"The action {action} is not valid for this web service.")
            return
        wanted = [v[0] for k, v in sorted(form.items()) if re.fullmatch(r"InstanceId\.\d+", k)]
        self._send(h, 200, self._topology_xml(wanted or sorted(self.instances)))

    def _topology_xml(self, ids: list[str]) -> str:
        items = []
        for iid in ids:
            inst = self.instances.get(iid)
            if inst is None:
                continue
            parts = [f"<instanceId>{escape(iid)}</instanceId>"]
            for key, tag in _FIELDS:
                if inst.get(key) is not None:
                    parts.append(f"<{tag}>{escape(str(inst[key]))}</{tag}>")
            nodes = "".join(f"<item>{escape(str(n))}</item>" for n in inst.get("NetworkNodes", ()))
            parts.append(f"<networkNodeSet>{nodes}</networkNodeSet>")
            items.append("<item>" + "".join(parts) + "</item>")
        return (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<DescribeInstanceTopologyResponse xmlns="{_NS}">'
            f"<requestId>{secrets.token_hex(8)}</requestId><instanceSet>{''.join(items)}</instanceSet>"
            "</DescribeInstanceTopologyResponse>"
        )
