"""The OpenAPI document is valid OpenAPI 3.1 and names every route tempo serves."""

from openapi_spec_validator import validate

from tempo.net import openapi

SERVED = {
    ("/v1/jobs", "post"), ("/v1/jobs", "get"), ("/v1/jobs/batch", "post"),
    ("/v1/jobs/{id}", "get"), ("/v1/jobs/{id}", "delete"), ("/v1/jobs/{id}", "patch"),
    ("/v1/jobs/{id}/pause", "post"), ("/v1/jobs/{id}/resume", "post"),
    ("/v1/jobs/{id}/trigger", "post"), ("/v1/jobs/{id}/runs", "get"), ("/v1/jobs/{id}/backfill", "post"),
    ("/v1/runs/{run_id}", "get"), ("/v1/runs/{run_id}/heartbeat", "post"),
    ("/v1/runs/{run_id}/result", "post"), ("/v1/claim", "post"),
    ("/v1/heartbeats", "post"), ("/v1/signals", "post"), ("/v1/results", "post"), ("/v1/events", "get"),
    ("/v1/schedules/preview", "post"), ("/healthz", "get"), ("/readyz", "get"),
    ("/metrics", "get"), ("/v1/openapi.json", "get"), ("/v1/cluster", "get"),
    ("/v1/cluster/digest", "get"), ("/v1/cluster/nodes", "post"), ("/v1/cluster/nodes/{node_id}", "delete"),
    ("/v1/runs", "get"), ("/v1/runs/{run_id}/cancel", "post"),
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


PUBLIC = {("/healthz", "get"), ("/readyz", "get"), ("/metrics", "get"), ("/v1/openapi.json", "get")}
LOCAL = PUBLIC | {("/v1/cluster", "get"), ("/v1/cluster/digest", "get")}


def _operations():
    for path, methods in openapi.document()["paths"].items():
        for method, operation in methods.items():
            yield path, method, operation


def test_every_token_route_declares_401_and_its_security():
    for path, method, operation in _operations():
        if (path, method) in PUBLIC:
            assert operation["security"] == [], (path, method)
            assert "401" not in operation["responses"], (path, method)
        else:
            assert operation["security"] == [{"bearer": []}], (path, method)
            assert "401" in operation["responses"], (path, method)


def test_routes_a_follower_forwards_declare_the_redirect():
    for path, method, operation in _operations():
        declared = "307" in operation["responses"]
        assert declared == ((path, method) not in LOCAL), (path, method)
        if declared:
            assert "Location" in operation["responses"]["307"]["headers"]


def test_routes_with_a_body_declare_413_and_both_media_types():
    for path, method, operation in _operations():
        if "requestBody" in operation:
            assert "413" in operation["responses"], (path, method)
            assert set(operation["requestBody"]["content"]) >= {"application/json", "application/msgpack"}


def test_removing_a_node_declares_409():
    # Found by tests/net/test_fuzz_api.py: a single node answers 409 conflict.
    operation = openapi.document()["paths"]["/v1/cluster/nodes/{node_id}"]["delete"]
    assert "409" in operation["responses"]


def test_every_operation_has_a_unique_operation_id():
    ids = [operation["operationId"] for _, _, operation in _operations()]
    assert len(ids) == len(set(ids)) == len(SERVED)


def test_links_name_operations_and_their_parameters():
    by_id = {operation["operationId"]: (path, operation) for path, _, operation in _operations()}
    for _, _, operation in _operations():
        for response in operation["responses"].values():
            for link in response.get("links", {}).values():
                path, _ = by_id[link["operationId"]]
                for name in link["parameters"]:
                    assert "{" + name + "}" in path, (link, path)


def test_schedule_rules_are_stated_in_the_document():
    schemas = openapi.document()["components"]["schemas"]
    schedule = schemas["JobCreate"]["properties"]["schedule"]
    assert [variant["required"] for variant in schedule["oneOf"]] == [["at"], ["cron"], ["every_s"]]
    assert schemas["PreviewIn"]["properties"]["schedule"]["oneOf"] == schedule["oneOf"]
