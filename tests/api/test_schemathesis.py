"""schemathesis against /openapi.json: generated requests never get a 5xx, and every
response matches the schema (status codes, content types, bodies).

Each operation is driven through `APIOperation.as_strategy()` with Hypothesis directly
(20 derandomized examples per operation and mode): schemathesis' lazy pytest loader
reads ``request.node._nodeid``, which pytest 9 no longer has.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from signoff.adapters.web import WebSurface
from signoff.api.app import create_app
from signoff.runtime.store.memory import MemTaskStore
from signoff.wiring import api_context, build_node
from tests.api.helpers import KEY, make_settings

AUTH = {"Authorization": f"Bearer {KEY}"}
CHECKS = [schemathesis.checks.not_a_server_error, status_code_conformance,
          content_type_conformance, response_schema_conformance]
OPERATIONS = [
    "GET /health", "GET /tasks", "POST /tasks", "GET /tasks/{task_id}",
    "GET /tasks/{task_id}/transcript",
    "POST /tasks/{task_id}/approve", "POST /tasks/{task_id}/deny", "GET /approvals",
    "GET /audit", "GET /.well-known/signoff-keys", "GET /grants", "DELETE /grants/{grant_id}",
    "GET /schedules",
    "GET /oncall", "GET /metrics",
    "POST /v1/approvals", "GET /v1/approvals/{approval_id}",
    "DELETE /v1/approvals/{approval_id}",
    "POST /v1/approvals/{approval_id}/outcome", "POST /approvals/{approval_id}/approve",
    "POST /approvals/{approval_id}/deny", "POST /approvals/{approval_id}/undo",
    "POST /approvals/batch", "GET /approvals/{approval_id}/passkey-options",
    "POST /passkeys/register/options", "POST /passkeys/register", "GET /passkeys",
    "DELETE /passkeys/{passkey_id}",
]


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The schema of a real app on an in-memory node (schemathesis runs it in its own loop)."""
    work_dir: Path = tmp_path_factory.mktemp("schemathesis")
    config = make_settings(work_dir)
    web = WebSurface()
    node = build_node(config, work_dir=work_dir, store=MemTaskStore(), surfaces={"web": web})
    ctx = api_context(config, store=node.store, engine=node.engine,
                                   decider=node.decider, flow=node.flow, clock=node.clock,
                                   wake=node.worker.wake, web=web)
    yield schemathesis.openapi.from_asgi("/openapi.json", create_app(ctx), headers=AUTH)


def operations(schema: Any) -> dict[str, Any]:
    found = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        found[f"{operation.method.upper()} {operation.path}"] = operation
    return found


def test_every_operation_is_fuzzed(api_schema: Any) -> None:
    """The list below covers every operation of the schema (a new route must be added)."""
    assert sorted(operations(api_schema)) == sorted(OPERATIONS)


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
                         ids=["positive", "negative"])
@pytest.mark.parametrize("label", OPERATIONS)
def test_operation_conforms_to_the_schema(api_schema: Any, label: str,
                                          mode: GenerationMode) -> None:
    """Generated requests get no 5xx and every response matches /openapi.json."""
    operation = operations(api_schema)[label]

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=20, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    def check(case: Any) -> None:
        case.call_and_validate(headers=AUTH, checks=CHECKS)

    try:
        check()
    except Unsatisfiable:
        if mode is not GenerationMode.NEGATIVE:
            raise
        pytest.skip(f"{label} takes no input that could be made invalid")
