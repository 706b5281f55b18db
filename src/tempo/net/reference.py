"""docs/reference.md, rendered from the OpenAPI document (net/openapi.py).

`tempo openapi --markdown > docs/reference.md` writes it; a test fails when
the committed file differs from what this gives, so the reference cannot
drift from the schemas that validate requests.
"""

from collections.abc import Iterator
from typing import Any

import msgspec

REGENERATE = "tempo openapi --markdown > docs/reference.md"
_BOUNDS = (
    ("minimum", "≥ {}"),
    ("exclusiveMinimum", "> {}"),
    ("maximum", "≤ {}"),
    ("exclusiveMaximum", "< {}"),
    ("minLength", "length ≥ {}"),
    ("maxLength", "length ≤ {}"),
    ("minItems", "≥ {} items"),
    ("maxItems", "≤ {} items"),
    ("pattern", "matches `{}`"),
)


def render(document: dict[str, Any]) -> str:
    """The whole reference: every operation, then every schema."""
    lines = [
        f"# {document['info']['title']} HTTP API reference",
        "",
        "Generated from the OpenAPI document that every node serves at `GET /v1/openapi.json`;",
        f"do not edit by hand: regenerate with `{REGENERATE}`.",
        "The contract and the decisions behind it are in [api.md](api.md).",
        "",
        "Request bodies and successful answers are JSON or MessagePack of the same shape",
        "(`Content-Type` and `Accept`, see api.md); problems are always `application/problem+json`.",
        "",
        "## Operations",
        "",
        "| method | path | summary |",
        "|---|---|---|",
    ]
    operations = list(_operations(document))
    for path, method, operation in operations:
        anchor = _anchor(operation["operationId"])
        lines.append(f"| {method.upper()} | [`{path}`](#{anchor}) | {_cell(operation['summary'])} |")
    for path, method, operation in operations:
        lines += ["", *_operation(path, method, operation)]
    lines += ["", "## Schemas"]
    for name, schema in sorted(document["components"]["schemas"].items()):
        lines += ["", *_schema(name, schema)]
    return "\n".join(lines) + "\n"


def _operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            yield path, method, operation


def _operation(path: str, method: str, operation: dict[str, Any]) -> list[str]:
    lines = [
        f'<a id="{_anchor(operation["operationId"])}"></a>',
        f"### {method.upper()} `{path}`",
        "",
        f"{operation['summary']}. Operation `{operation['operationId']}`; "
        + ("needs a bearer token." if operation.get("security") else "needs no token."),
    ]
    if operation.get("parameters"):
        lines += ["", "| parameter | in | type | required | bounds | description |", "|---|---|---|---|---|---|"]
        for p in operation["parameters"]:
            lines.append(
                f"| `{p['name']}` | {p['in']} | {_type(p['schema'])} | {'yes' if p.get('required') else 'no'} "
                f"| {_cell(_bounds(p['schema']))} | {_cell(p.get('description', ''))} |"
            )
    body = operation.get("requestBody")
    if body:
        media = ", ".join(f"`{m}`" for m in body["content"])
        schema = next(iter(body["content"].values()))["schema"]
        lines += ["", f"Request body ({media}): {_type(schema)}."]
    lines += ["", "| status | body | description |", "|---|---|---|"]
    for status, response in sorted(operation["responses"].items()):
        lines.append(f"| {status} | {_response_body(response)} | {_cell(_response_text(response))} |")
    return lines


def _response_body(response: dict[str, Any]) -> str:
    content = response.get("content")
    if not content:
        return "none"
    types = {_type(c["schema"]) for c in content.values()}
    media = ", ".join(f"`{m}`" for m in content)
    return f"{' or '.join(sorted(types))} ({media})"


def _response_text(response: dict[str, Any]) -> str:
    text: str = response["description"]
    for name in response.get("headers", {}):
        text += f"; header `{name}`"
    links = response.get("links", {})
    if links:
        text += "; its ID goes to " + ", ".join(f"[`{n}`](#{_anchor(n)})" for n in links)
    return text


def _schema(name: str, schema: dict[str, Any]) -> list[str]:
    lines = [f"### {name}"]
    if schema.get("description"):
        lines += ["", schema["description"]]
    properties = schema.get("properties", {})
    if not properties:
        return [*lines, "", f"Type: {_type(schema)}."]
    required = set(schema.get("required", ()))
    closed = schema.get("additionalProperties") is False
    lines += [
        "",
        "Unknown fields are rejected (400)." if closed else "Clients should ignore fields they do not know.",
        "",
        "| field | type | required | default | bounds | description |",
        "|---|---|---|---|---|---|",
    ]
    for field, prop in properties.items():
        default = f"`{_json(prop['default'])}`" if "default" in prop else ""
        lines.append(
            f"| `{field}` | {_type(prop)} | {'yes' if field in required else 'no'} | {_cell(default)} "
            f"| {_cell(_bounds(prop))} | {_cell(_description(prop))} |"
        )
    return lines


def _description(schema: dict[str, Any]) -> str:
    if "description" in schema:
        description: str = schema["description"]
        return description
    return next((v["description"] for v in schema.get("anyOf", ()) if "description" in v), "")


def _type(schema: dict[str, Any]) -> str:
    """A schema's type in a few words, with links to named schemas."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        return f"[{name}](#{_anchor(name)})"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(dict.fromkeys(_type(s) for s in schema[key]))
    if "enum" in schema:
        return " or ".join(f"`{_json(v)}`" for v in schema["enum"])
    kind = schema.get("type")
    if kind == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if kind == "object":
        extra = schema.get("additionalProperties")
        return f"object of {_type(extra)}" if isinstance(extra, dict) and extra else "object"
    if kind is None:
        return "any JSON value"
    if isinstance(kind, list):
        return " or ".join(kind)
    return f"{kind} ({schema['format']})" if "format" in schema else kind


def _bounds(schema: dict[str, Any]) -> str:
    """Every bound of a schema, of its non-null variants and of its items."""
    found = [template.format(schema[key]) for key, template in _BOUNDS if key in schema]
    found.extend(_bounds(variant) for variant in schema.get("anyOf", ()) if variant.get("type") != "null")
    if "items" in schema and _bounds(schema["items"]):
        found.append(f"each item: {_bounds(schema['items'])}")
    if "oneOf" in schema and "$ref" in schema:
        given = [variant["required"][0] for variant in schema["oneOf"]]
        found.append("exactly one of " + ", ".join(f"`{g}`" for g in given))
    return "; ".join(f for f in found if f)


def _anchor(name: str) -> str:
    return name.lower()


def _json(value: Any) -> str:
    return msgspec.json.encode(value).decode()


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")
