"""docs/reference.md is rendered from the OpenAPI document, and up to date."""

import json
from pathlib import Path

from tempo import cli
from tempo.net import openapi, reference

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference.md"


def test_the_committed_reference_is_what_the_generator_gives():
    assert REFERENCE.read_text(encoding="utf-8") == reference.render(openapi.document()), (
        f"docs/reference.md is out of date; regenerate it with `{reference.REGENERATE}`"
    )


def test_every_operation_is_in_the_reference_with_its_responses():
    text = reference.render(openapi.document())
    for path, methods in openapi.document()["paths"].items():
        for method, operation in methods.items():
            section = text.split(f"### {method.upper()} `{path}`\n", 1)[1].split("\n### ", 1)[0]
            assert operation["summary"] in section
            for status in operation["responses"]:
                assert f"\n| {status} | " in section, (method, path, status)
            for parameter in operation.get("parameters", ()):
                assert f"| `{parameter['name']}` | {parameter['in']} |" in section


def test_request_fields_show_types_bounds_and_defaults():
    text = reference.render(openapi.document())
    create = text.split("### JobCreate\n", 1)[1].split("\n### ", 1)[0]
    assert "Unknown fields are rejected (400)." in create
    assert "| `lease_s` | integer | no | `60` | ≥ 1; ≤ 3600 |" in create
    assert "| `schedule` | [ScheduleIn](#schedulein) | yes |  | exactly one of `at`, `cron`, `every_s`, `after` |" in create
    retry = text.split("### RetryIn\n", 1)[1].split("\n### ", 1)[0]
    assert "each item: ≥ 0; ≤ 86400" in retry


def test_the_cli_prints_the_document_and_the_reference(capsys):
    assert cli.main(["openapi"]) == 0
    assert json.loads(capsys.readouterr().out) == openapi.document()
    assert cli.main(["openapi", "--markdown"]) == 0
    assert capsys.readouterr().out == reference.render(openapi.document())
