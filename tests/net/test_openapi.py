"""The OpenAPI document is valid OpenAPI 3.1 and names every route tempo serves."""

import msgspec
from openapi_spec_validator import validate

from tempo import schema
from tempo.net import openapi, routes
from tempo.net.api import Api
from tempo.net.routes import ROUTES, Answer, Route, Router, bind

# Routes a client has no use for: the peers' raft stream.
UNDOCUMENTED = {("/v1/raft", "post")}


def _served():
    """What the router of the API answers, built as net/api.py builds it."""
    router = Router(bind(ROUTES, Api))
    return {(route.path, route.method.lower()) for route in router.routes}


def test_the_document_is_valid_openapi_3_1():
    validate(openapi.document())


def test_every_served_route_is_documented():
    paths = openapi.document()["paths"]
    documented = {(path, method) for path, methods in paths.items() for method in methods}
    assert documented == _served() - UNDOCUMENTED
    assert _served() >= UNDOCUMENTED


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
    assert len(ids) == len(set(ids)) == len(_served() - UNDOCUMENTED)


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
    assert [variant["required"] for variant in schedule["oneOf"]] == [["at"], ["cron"], ["every_s"], ["after"]]
    assert schemas["PreviewIn"]["properties"]["schedule"]["oneOf"] == schedule["oneOf"]


def _named_structs():
    named = {schema.Problem, schema.InternalProblem}
    for route in ROUTES:
        named |= {route.body, *(answer.kind for answer in route.answers.values())}
    return named - {None}


def test_every_listed_component_is_named_by_a_route():
    assert set(openapi._STRUCTS) <= _named_structs()


def test_a_new_routes_struct_joins_the_components(monkeypatch):
    class WidgetOut(msgspec.Struct):
        size: int

    widget = Route("GET", "/v1/widget", "widget", "widget", "getWidget", "A widget",
                   answers={"200": Answer("the widget", WidgetOut)})
    monkeypatch.setattr(routes, "ROUTES", (*ROUTES, widget))
    document = openapi.document()
    assert "WidgetOut" in document["components"]["schemas"]
    assert document["paths"]["/v1/widget"]["get"]["operationId"] == "getWidget"
    assert "307" in document["paths"]["/v1/widget"]["get"]["responses"]
