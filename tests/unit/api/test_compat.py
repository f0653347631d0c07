"""Every KAI object in KAI's own docs and examples validates against our models and CRDs.

The reference material lives beside the repository (``../shared/kai-reference``); without it these
tests skip.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from kai.api.registry import json_schema, lookup

REFERENCE = Path(__file__).resolve().parents[3].parent / "shared" / "kai-reference"
KAI_KINDS = {"Queue", "PodGroup", "Topology", "BindRequest", "SchedulingShard"}
KAI_GROUPS = {"scheduling.run.ai", "kai.scheduler"}


def _objects() -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    for folder in ("docs", "examples"):
        for path in sorted((REFERENCE / folder).rglob("*.y*ml")):
            try:
                docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
            except yaml.YAMLError:
                continue  # Helm templates and the like: not Kubernetes objects
            for i, doc in enumerate(docs):
                if not isinstance(doc, dict) or doc.get("kind") not in KAI_KINDS:
                    continue
                if str(doc.get("apiVersion", "")).split("/")[0] not in KAI_GROUPS:
                    continue
                found.append((f"{path.relative_to(REFERENCE)}#{i}", doc))
    return found


OBJECTS = _objects() if REFERENCE.is_dir() else []


def test_reference_objects_found() -> None:
    if not REFERENCE.is_dir():
        pytest.skip(f"{REFERENCE} is not present")
    kinds = {obj["kind"] for _, obj in OBJECTS}
    assert {"Queue", "PodGroup", "Topology"} <= kinds, kinds


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="../shared/kai-reference is not present")
@pytest.mark.parametrize(("where", "obj"), OBJECTS, ids=[w for w, _ in OBJECTS])
def test_reference_object_validates(
    where: str, obj: dict[str, Any], crd_check: Callable[..., list[str]]
) -> None:
    info = lookup(obj["apiVersion"], obj["kind"])
    assert info is not None, f"{where}: {obj['apiVersion']} {obj['kind']} is not registered"
    info.model.model_validate(obj)
    validator = jsonschema.Draft202012Validator(json_schema(info))
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(obj)]
    assert errors == [], where
    assert crd_check(info, obj) == [], where
