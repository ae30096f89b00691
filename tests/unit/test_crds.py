"""The generated CustomResourceDefinitions: current, structural, and saying what the models say.

Covers drift (crds/ and docs/reference/crds.md equal what the models generate), the structural
rules every schema must meet, the JSON Schema -> OpenAPI conversion case by case, the names and
printer columns of each kind, and the ``--check`` command line.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml
from pydantic import BaseModel, ConfigDict, Field

from vigil.model import ALL_KINDS, SCHEDULED_JOB, WORKFLOW, WORKFLOW_DEFINITION, ResourceKind
from vigil.model.common import SpecModel
from vigil.model.crdgen import (
    PRESERVE,
    REGENERATE_HINT,
    SchemaError,
    crd_filename,
    crd_for,
    generate_crds,
    main,
    reference_docs,
    structural_errors,
    structural_schema,
)

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "crds"
DOCS = ROOT / "docs" / "reference" / "crds.md"

KINDS = [pytest.param(kind, id=kind.kind) for kind in ALL_KINDS]


def openapi_schema(kind: ResourceKind) -> dict[str, Any]:
    schema: dict[str, Any] = crd_for(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def properties(schema: Mapping[str, Any], path: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every named property below ``schema``, with its dotted path."""
    for name, prop in schema.get("properties", {}).items():
        yield f"{path}{name}", prop
        for child in (prop, prop.get("items", {}), prop.get("additionalProperties", {})):
            if isinstance(child, Mapping):
                yield from properties(child, f"{path}{name}.")


# --------------------------------------------------------------------------------------------
# Drift


@pytest.mark.parametrize("kind", KINDS)
def test_crd_files_are_current(kind: ResourceKind) -> None:
    name = crd_filename(kind)
    on_disk = (CRDS / name).read_text() if (CRDS / name).exists() else ""
    assert on_disk == generate_crds([kind])[name], f"crds/{name}: {REGENERATE_HINT}"


def test_crd_reference_docs_are_current() -> None:
    on_disk = DOCS.read_text() if DOCS.exists() else ""
    assert on_disk == reference_docs(), f"docs/reference/crds.md: {REGENERATE_HINT}"


def test_no_stale_crd_files() -> None:
    expected = {crd_filename(kind) for kind in ALL_KINDS}
    present = {path.name for path in CRDS.glob("vigil.dev_*.yaml")}
    assert present == expected, REGENERATE_HINT


def test_check_mode_reports_drift_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = tmp_path / "crds.md"
    assert main([str(tmp_path), "--docs", str(docs)]) == 0
    assert main(["--check", str(tmp_path), "--docs", str(docs)]) == 0

    tampered = tmp_path / crd_filename(SCHEDULED_JOB)
    tampered.write_text(tampered.read_text().replace("shortNames:\n    - sj", "shortNames:\n    - sjx"))
    (tmp_path / "vigil.dev_leftovers.yaml").write_text("kind: Leftover\n")
    capsys.readouterr()

    assert main(["--check", str(tmp_path), "--docs", str(docs)]) == 1
    output = capsys.readouterr()
    assert "-    - sjx" in output.out and "+    - sj" in output.out
    assert "vigil.dev_leftovers.yaml" in output.out
    assert "make crds" in output.err
    assert "sjx" in tampered.read_text()


# --------------------------------------------------------------------------------------------
# Structural rules


@pytest.mark.parametrize("kind", KINDS)
def test_every_schema_is_structural(kind: ResourceKind) -> None:
    assert structural_errors(openapi_schema(kind), kind.kind) == []


@pytest.mark.parametrize("kind", KINDS)
def test_every_field_is_described(kind: ResourceKind) -> None:
    spec_and_status = {
        part: openapi_schema(kind)["properties"][part] for part in ("spec", "status")
    }
    undescribed = [
        f"{part}.{path}"
        for part, schema in spec_and_status.items()
        for path, prop in properties(schema)
        if not prop.get("description")
    ]
    assert undescribed == []


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        pytest.param({"type": "object", "properties": {"x": {}}}, "<root>.x: no type", id="untyped-field"),
        pytest.param({"type": "object", "properties": {"x": {"$ref": "#/$defs/X"}}}, "references must be inlined", id="reference"),
        pytest.param({"type": "string", "anyOf": [{"type": "string"}]}, "type is not allowed inside anyOf", id="typed-junctor"),
        pytest.param({"type": "object", "additionalProperties": False}, "must be a schema", id="boolean-additional-properties"),
        pytest.param({"type": "array", "items": {"type": "object"}, "x-kubernetes-list-type": "set"}, "a set's items must be scalars", id="set-of-objects"),
        pytest.param(
            {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "string"}}}, "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["id"]},
            "map key id must be required or defaulted",
            id="optional-map-key",
        ),
        pytest.param(
            {"type": "object", "properties": {"a": {"type": "string"}}, "x-kubernetes-validations": [{"rule": "true", "message": "m", "fieldPath": ".b"}]},
            "CEL fieldPath .b names no property",
            id="cel-field-path",
        ),
        pytest.param({"type": "string", "enum": ["a"], "default": "b"}, "default: 'b' is not one of ['a']", id="default-outside-enum"),
        pytest.param({"type": "integer", "default": "1"}, "default: '1' is not of type integer", id="default-wrong-type"),
    ],
)
def test_structural_errors_finds_what_the_api_server_refuses(schema: dict[str, Any], problem: str) -> None:
    assert any(problem in error for error in structural_errors(schema))


# --------------------------------------------------------------------------------------------
# JSON Schema -> OpenAPI conversion


class Inner(SpecModel):
    """An inner object."""

    size: int = Field(default=1, ge=1, le=9, description="A size.")


class Sample(SpecModel):
    """A sample."""

    required_text: str = Field(description="Required.")
    maybe_number: int | None = Field(default=None, description="Optional.")
    choice: Literal["a", "b"] = Field(default="a", description="A choice.")
    only: Literal["x"] = Field(default="x", description="A constant.")
    free: dict[str, Any] | None = Field(default=None, description="Anything.")
    labels: dict[str, str] = Field(default_factory=dict, description="A map.")
    inner: Inner | None = Field(default=None, description="Uses the inner object.")
    inners: list[Inner] = Field(default_factory=list, max_length=3, description="Several.")


def test_conversion_inlines_references_and_flattens_optionals() -> None:
    schema = structural_schema(Sample)
    props = schema["properties"]
    assert schema["required"] == ["requiredText"]
    assert schema["description"] == "A sample."
    assert props["maybeNumber"] == {"description": "Optional.", "type": "integer"}
    assert props["choice"] == {"description": "A choice.", "type": "string", "enum": ["a", "b"], "default": "a"}
    assert props["only"]["enum"] == ["x"]
    assert props["free"] == {"description": "Anything.", "type": "object", PRESERVE: True}
    assert props["labels"]["additionalProperties"] == {"type": "string"}
    assert props["inner"]["description"] == "Uses the inner object."
    assert props["inner"]["properties"]["size"] == {
        "description": "A size.",
        "type": "integer",
        "default": 1,
        "minimum": 1,
        "maximum": 9,
    }
    assert props["inners"]["maxItems"] == 3
    assert props["inners"]["items"]["description"] == "An inner object."
    assert structural_errors(schema) == []


def test_conversion_refuses_a_union_it_cannot_make_structural() -> None:
    class Union(BaseModel):
        model_config = ConfigDict(extra="forbid")
        value: str | list[str] = Field(description="Either.")

    with pytest.raises(SchemaError, match="a union of several types cannot be structural"):
        structural_schema(Union)


def test_conversion_refuses_exclusive_bounds() -> None:
    class Exclusive(BaseModel):
        value: int = Field(gt=0, description="Positive.")

    with pytest.raises(SchemaError, match="use ge/le"):
        structural_schema(Exclusive)


# --------------------------------------------------------------------------------------------
# What the CRDs say


@pytest.mark.parametrize("kind", KINDS)
def test_every_crd_is_namespaced_served_stored_with_a_status_subresource(kind: ResourceKind) -> None:
    crd = yaml.safe_load((CRDS / crd_filename(kind)).read_text())
    assert crd["metadata"]["name"] == f"{kind.plural}.vigil.dev"
    assert crd["spec"]["scope"] == "Namespaced"
    assert crd["spec"]["names"]["shortNames"] == list(kind.short_names)
    assert crd["spec"]["names"]["categories"] == ["vigil"]
    (version,) = crd["spec"]["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}


def test_scheduled_job_columns_answer_is_it_healthy() -> None:
    (version,) = crd_for(SCHEDULED_JOB)["spec"]["versions"]
    columns = {column["name"]: column["jsonPath"] for column in version["additionalPrinterColumns"]}
    assert columns == {
        "Schedule": ".status.schedule",
        "Timezone": ".spec.timezone",
        "Next Run": ".status.nextRun",
        "Last Scheduled": ".status.lastScheduleTime",
        "Last Success": ".status.lastSuccessfulTime",
        "Health": '.status.conditions[?(@.type=="Overdue")].reason',
        "Ready": '.status.conditions[?(@.type=="Ready")].status',
        "Age": ".metadata.creationTimestamp",
    }


def test_workflow_columns() -> None:
    (version,) = crd_for(WORKFLOW)["spec"]["versions"]
    assert [column["name"] for column in version["additionalPrinterColumns"]] == [
        "Phase",
        "Progress",
        "Current",
        "Age",
    ]


def test_scheduled_job_rules_are_attached() -> None:
    spec = openapi_schema(SCHEDULED_JOB)["properties"]["spec"]
    messages = [rule["message"] for rule in spec["x-kubernetes-validations"]]
    assert "exactly one of runAt, cron or every must be set" in messages
    assert "exactly one of template, workflowTemplate or task must be set" in messages
    assert spec["properties"]["every"]["x-kubernetes-validations"][0]["message"] == (
        "must be greater than zero"
    )
    assert spec["properties"]["jitter"].get("x-kubernetes-validations") is None


def test_workflow_steps_are_one_atomic_value_and_a_definitions_are_keyed_by_id() -> None:
    steps = openapi_schema(WORKFLOW)["properties"]["spec"]["properties"]["steps"]
    assert steps["x-kubernetes-list-type"] == "atomic"
    assert "x-kubernetes-list-map-keys" not in steps
    assert steps["maxItems"] == 200
    versions = openapi_schema(WORKFLOW_DEFINITION)["properties"]["spec"]["properties"]["versions"]
    keyed = versions["items"]["properties"]["steps"]
    assert (keyed["x-kubernetes-list-type"], keyed["x-kubernetes-list-map-keys"]) == ("map", ["id"])


def test_status_conditions_are_a_map_keyed_by_type() -> None:
    for kind in ALL_KINDS:
        conditions = openapi_schema(kind)["properties"]["status"]["properties"].get("conditions")
        if conditions is not None:
            assert conditions["x-kubernetes-list-map-keys"] == ["type"], kind.kind


def test_server_side_defaults_match_the_models() -> None:
    spec = openapi_schema(SCHEDULED_JOB)["properties"]["spec"]["properties"]
    assert spec["timezone"]["default"] == "UTC"
    assert spec["catchUpWindow"]["default"] == "5m"
    assert spec["retry"]["default"] == {}
    assert spec["retry"]["properties"]["backoff"]["properties"]["max"]["default"] == "10m"
