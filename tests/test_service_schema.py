"""A bounded schemathesis run against the API's own OpenAPI schema: no request it makes from
the schema — valid, invalid or odd — gets a 5xx. The allocator is not started, so a valid
job only queues."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

schemathesis = pytest.importorskip("schemathesis")
pytest.importorskip("httpx")
from hypothesis import HealthCheck, settings  # noqa: E402

from rightsize.core.resources import Resources  # noqa: E402
from rightsize.service.allocator import Allocator  # noqa: E402
from rightsize.service.app import create_app  # noqa: E402
from rightsize.service.store import Store  # noqa: E402

#: Examples per operation: bounded so that the run takes seconds, in CI and here.
EXAMPLES = 40

_home = Path(tempfile.mkdtemp(prefix="rightsize-schema-"))
_store = Store(str(_home / "store.db"))
_token = _store.create_token("fuzzer")
_app = create_app(_store, Allocator(_store, Resources(2, 4 * 2**30), _home / "work"))
# the event streams answer until their job ends (a queued job's never, here): their
# checks are tests/test_service_live.py's
schema = schemathesis.openapi.from_asgi("/openapi.json", _app).exclude(path_regex=r"/events$")


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_request_gets_a_server_error(case):
    response = case.call(headers={"Authorization": f"Bearer {_token}"})
    assert response.status_code < 500, (case.method, case.path, case.body, response.text[:500])
