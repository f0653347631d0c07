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


# --- our CRDs against KAI's own CRDs -------------------------------------------------------------

# Fields we add on purpose (this project's extensions).
OUR_EXTRA_FIELDS = {"Queue": {".status.fairShare", ".status.fairShare{}"}}


def _field_types(node: dict[str, Any], prefix: str, out: dict[str, str]) -> dict[str, str]:
    if node.get("x-kubernetes-int-or-string"):
        out[prefix] = "int-or-string"
    elif node.get("x-kubernetes-preserve-unknown-fields") and "type" not in node:
        out[prefix] = "quantity" if "pattern" in node else "any"
    else:
        out[prefix] = node.get("type", "any")
    for key, sub in node.get("properties", {}).items():
        if prefix == "" and key == "metadata":
            continue
        _field_types(sub, f"{prefix}.{key}", out)
    if "items" in node:
        _field_types(node["items"], f"{prefix}[]", out)
    if isinstance(node.get("additionalProperties"), dict):
        _field_types(node["additionalProperties"], f"{prefix}{{}}", out)
    return out


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="../shared/kai-reference is not present")
@pytest.mark.parametrize("kind", sorted(KAI_KINDS))
def test_our_crd_has_every_field_of_kais_crd(kind: str) -> None:
    from kai.api.generate import generated_files
    from kai.api.registry import all_kinds

    (info,) = [i for i in all_kinds() if i.kind == kind and i.group in KAI_GROUPS]
    theirs_crd = yaml.safe_load(
        (REFERENCE / "crds" / f"{info.group}_{info.plural}.yaml").read_text()
    )
    ours_crd = yaml.safe_load(generated_files()[info.crd_path].split("---\n", 1)[1])
    for key in ("group", "scope"):
        assert ours_crd["spec"][key] == theirs_crd["spec"][key]
    for key in ("kind", "listKind", "plural", "singular", "shortNames"):
        assert ours_crd["spec"]["names"].get(key) == theirs_crd["spec"]["names"].get(key), key
    (theirs_version,) = theirs_crd["spec"]["versions"]
    (ours_version,) = ours_crd["spec"]["versions"]
    assert ours_version["name"] == theirs_version["name"]
    assert ("subresources" in ours_version) == ("subresources" in theirs_version)
    theirs = _field_types(theirs_version["schema"]["openAPIV3Schema"], "", {})
    ours = _field_types(ours_version["schema"]["openAPIV3Schema"], "", {})
    assert [p for p in theirs if p not in ours] == [], "fields of KAI's CRD we lack"
    # our quantities accept every value KAI's int-or-string ones do, and fractions (1.5) too
    widened = {("int-or-string", "quantity")}
    assert {
        p: (theirs[p], ours[p])
        for p in theirs
        if theirs[p] != ours[p] and (theirs[p], ours[p]) not in widened
    } == {}
    assert {p for p in ours if p not in theirs} == OUR_EXTRA_FIELDS.get(kind, set())
