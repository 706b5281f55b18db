"""The OpenAPI document is valid OpenAPI 3.1 and names every route tempo serves."""

from openapi_spec_validator import validate

from tempo.net import openapi

SERVED = {
    ("/v1/jobs", "post"), ("/v1/jobs", "get"), ("/v1/jobs/batch", "post"),
    ("/v1/jobs/{id}", "get"), ("/v1/jobs/{id}", "delete"),
    ("/v1/jobs/{id}/pause", "post"), ("/v1/jobs/{id}/resume", "post"),
    ("/v1/jobs/{id}/trigger", "post"), ("/v1/jobs/{id}/runs", "get"),
    ("/v1/runs/{run_id}", "get"), ("/v1/runs/{run_id}/heartbeat", "post"),
    ("/v1/runs/{run_id}/result", "post"), ("/v1/claim", "post"),
    ("/v1/heartbeats", "post"), ("/v1/results", "post"), ("/v1/events", "get"),
    ("/v1/schedules/preview", "post"), ("/healthz", "get"), ("/readyz", "get"),
    ("/metrics", "get"), ("/v1/openapi.json", "get"), ("/v1/cluster", "get"),
    ("/v1/cluster/digest", "get"), ("/v1/cluster/nodes", "post"), ("/v1/cluster/nodes/{node_id}", "delete"),
}


def test_the_document_is_valid_openapi_3_1():
    validate(openapi.document())


def test_every_served_route_is_documented():
    paths = openapi.document()["paths"]
    documented = {(path, method) for path, methods in paths.items() for method in methods}
    assert documented == SERVED


def test_request_schemas_forbid_unknown_fields():
    schemas = openapi.document()["components"]["schemas"]
    for name in ("JobCreate", "ClaimIn", "ResultIn", "HeartbeatsIn", "PreviewIn"):
        assert schemas[name]["additionalProperties"] is False, name
