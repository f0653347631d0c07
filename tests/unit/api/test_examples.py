"""An object of every registered kind validates against its model, JSON Schema and CRD."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from kai.api.registry import KindInfo, all_kinds, json_schema, lookup

EXAMPLES: list[dict[str, Any]] = [
    d for d in yaml.safe_load_all((Path(__file__).parent / "examples.yaml").read_text()) if d
]


def _info(obj: dict[str, Any]) -> KindInfo:
    info = lookup(obj["apiVersion"], obj["kind"])
    assert info is not None, f"{obj['apiVersion']} {obj['kind']} is not registered"
    return info


def _id(obj: dict[str, Any]) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


def test_every_kind_has_an_example() -> None:
    covered = {(o["apiVersion"], o["kind"]) for o in EXAMPLES}
    missing = [
        i.api_version + " " + i.kind for i in all_kinds() if (i.api_version, i.kind) not in covered
    ]
    assert not missing, f"add an example of {missing} to examples.yaml"


@pytest.mark.parametrize("obj", EXAMPLES, ids=_id)
def test_example_validates_against_model(obj: dict[str, Any]) -> None:
    _info(obj).model.model_validate(obj)


@pytest.mark.parametrize("obj", EXAMPLES, ids=_id)
def test_example_validates_against_json_schema(obj: dict[str, Any]) -> None:
    schema = json_schema(_info(obj))
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(obj)]
    assert not errors


@pytest.mark.parametrize("obj", EXAMPLES, ids=_id)
def test_example_validates_against_crd(
    obj: dict[str, Any], crd_check: Callable[..., list[str]]
) -> None:
    assert crd_check(_info(obj), obj) == []


@pytest.mark.parametrize("obj", EXAMPLES, ids=_id)
def test_model_dump_round_trips(obj: dict[str, Any]) -> None:
    """Dumping a model (without unset fields) gives back an object that validates the same."""
    model = _info(obj).model
    parsed = model.model_validate(obj)
    again = model.model_validate(parsed.model_dump(exclude_unset=True))
    assert again == parsed
