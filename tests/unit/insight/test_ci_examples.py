"""The CI examples: the Argo Workflows WorkflowTemplate is what its builder (the argo-workflows
models) makes and passes Argo's API types; both examples run kai commands that exist."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from kai import cli

CI = Path(__file__).parents[3] / "examples" / "ci"
TEMPLATE = CI / "argo-workflow-template.yaml"

argo = pytest.importorskip("argo_workflows")


def _builder() -> Any:
    spec = importlib.util.spec_from_file_location(
        "argo_workflow_template", CI / "argo_workflow_template.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Response:
    def __init__(self, document: dict[str, Any]) -> None:
        self.data = json.dumps(document)


def argo_check(document: dict[str, Any]) -> None:
    """Read ``document`` into Argo's WorkflowTemplate model with type checks (types, required
    fields), then refuse any field the model does not know (Argo's strict decoding)."""
    from argo_workflows.api_client import ApiClient
    from argo_workflows.model.io_argoproj_workflow_v1alpha1_workflow_template import (
        IoArgoprojWorkflowV1alpha1WorkflowTemplate as WorkflowTemplate,
    )
    from argo_workflows.model_utils import ModelNormal, ModelSimple

    model = ApiClient().deserialize(_Response(document), (WorkflowTemplate,), True)

    def walk(value: Any, raw: Any, where: str) -> None:
        if isinstance(value, ModelSimple):
            walk(value.value, raw, where)
        elif isinstance(value, ModelNormal):
            known = type(value).attribute_map
            unknown = sorted(set(raw) - set(known.values()))
            assert not unknown, f"{where}: unknown field(s) {unknown}"
            for attr, key in known.items():
                if key in raw:
                    walk(value[attr], raw[key], f"{where}.{key}")
        elif isinstance(value, list):
            for i, (item, raw_item) in enumerate(zip(value, raw, strict=True)):
                walk(item, raw_item, f"{where}[{i}]")

    walk(model, document, "WorkflowTemplate")


def test_the_template_is_the_builders_output_and_passes_argos_types() -> None:
    assert TEMPLATE.read_text() == _builder().render(), (
        "examples/ci/argo-workflow-template.yaml is stale: run "
        "python examples/ci/argo_workflow_template.py > examples/ci/argo-workflow-template.yaml"
    )
    document = yaml.safe_load(TEMPLATE.read_text())
    assert (document["apiVersion"], document["kind"]) == (
        "argoproj.io/v1alpha1",
        "WorkflowTemplate",
    )
    argo_check(document)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["spec"].update(entrypont="main"), "unknown field(s) ['entrypont']"),
        (lambda d: d["spec"]["templates"][1]["container"].update(args="kai"), "args"),
        (lambda d: d["spec"]["templates"][1]["container"].pop("image"), "image"),
    ],
)
def test_argos_types_refuse_a_broken_template(change: Any, message: str) -> None:
    document = yaml.safe_load(TEMPLATE.read_text())
    change(document)
    with pytest.raises((AssertionError, TypeError, argo.exceptions.ApiTypeError)) as info:
        argo_check(document)
    assert message in str(info.value)


def _scripts(name: str) -> list[str]:
    document = yaml.safe_load((CI / name).read_text())
    if document.get("kind") == "WorkflowTemplate":
        return [
            arg
            for t in document["spec"]["templates"]
            if "container" in t
            for arg in t["container"].get("args", [])
        ]
    return [
        step["run"] for job in document["jobs"].values() for step in job["steps"] if "run" in step
    ]


def _kai_commands(script: str) -> list[list[str]]:
    """Every ``kai ...`` command of a shell script (continuations joined, ``;``/``&&``/``||``
    split, redirections dropped)."""
    commands = []
    for line in script.replace("\\\n", " ").splitlines():
        for part in re.split(r";|&&|\|\|", line):
            words = shlex.split(part.split(">")[0])
            if words[:1] == ["kai"] and len(words) > 1:
                commands.append(words[1:])
    return commands


@pytest.mark.parametrize("name", ["github-actions.yaml", "argo-workflow-template.yaml"])
def test_the_examples_run_kai_commands_that_exist(name: str) -> None:
    commands = [c for script in _scripts(name) for c in _kai_commands(script)]
    assert {c[0] for c in commands} == {"validate", "plan"}
    for argv in commands:
        parser = cli.build_parser(cli.COMMANDS, argv[0])
        parser.parse_args(argv)  # exits 2 on an unknown flag
