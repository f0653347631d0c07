"""The ``document`` and ``schema`` rules, their precedence, and the policy documents."""

from __future__ import annotations

import pytest

from kai.api.documents import (
    DOCUMENT_MODELS,
    QueueTree,
    SchedulerPolicy,
    SharingPolicy,
    TopologyPolicy,
)
from kai.api.registry import json_schema, lookup

GITOPS = "gitops.kai.scheduler/v1alpha1"


def doc(kind: str, spec: str, name: str = "x", api: str = GITOPS) -> str:
    return f"apiVersion: {api}\nkind: {kind}\nmetadata:\n  name: {name}\nspec:\n{spec}"


def test_every_document_kind_is_registered() -> None:
    assert [m.KIND for m in DOCUMENT_MODELS] == [
        "QueueTree",
        "TopologyPolicy",
        "SharingPolicy",
        "SchedulerPolicy",
    ]
    for model in DOCUMENT_MODELS:
        info = lookup(f"{model.API_GROUP}/{model.API_VERSION}", model.KIND)
        assert info is not None and info.model is model
        schema = json_schema(info)
        assert schema["properties"]["kind"]["const"] == model.KIND
        assert schema["description"]


def test_models_parse_the_wire_form() -> None:
    tree = QueueTree.model_validate(
        QueueTree.skeleton(
            "t",
            queues=[{"name": "a", "quota": {"gpu": 1, "cpu": "500m"}, "children": [{"name": "b"}]}],
        )
    )
    assert tree.spec.queues[0].children is not None
    assert tree.spec.queues[0].children[0].name == "b"
    assert TopologyPolicy.model_validate(
        TopologyPolicy.skeleton("t", levels=[{"nodeLabel": "a/b"}])
    )
    assert (
        SharingPolicy.model_validate(
            SharingPolicy.skeleton("s", modes=["mig"])
        ).spec.defaultPlacement
        == "pack"
    )
    assert SchedulerPolicy.model_validate(SchedulerPolicy.skeleton("d")).spec.nodePool == ""
    with pytest.raises(ValueError):
        QueueTree.model_validate(QueueTree.skeleton("t", queues=[{"name": "a", "colour": 1}]))


# document ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line", "column", "words"),
    [
        ("- a\n- b\n", 1, 1, "must be a mapping"),
        ("just a string\n", 1, 1, "must be a mapping"),
        ("kind: QueueTree\nmetadata: {name: a}\n", 1, 1, "missing apiVersion"),
        (f"apiVersion: {GITOPS}\nmetadata: {{name: a}}\n", 1, 1, "missing kind"),
        (
            f"apiVersion: {GITOPS}\nkind: QueueForest\nmetadata: {{name: a}}\n",
            2,
            7,
            "unknown kind 'QueueForest'",
        ),
        (
            "apiVersion: scheduling.run.ai/v1\nkind: Queue\nmetadata: {name: a}\n",
            1,
            13,
            "unknown version",
        ),
        (
            "apiVersion: kai.scheduler/v2\nkind: Topology\nmetadata: {name: a}\n",
            1,
            13,
            "kai.scheduler/v1alpha1",
        ),
        (
            f"apiVersion: {GITOPS}\nkind: QueueTree\nmetadata: {{}}\nspec: {{}}\n",
            3,
            11,
            "metadata.name",
        ),
        (f"apiVersion: {GITOPS}\nkind: QueueTree\nspec: {{}}\n", 1, 1, "metadata.name"),
    ],
)
def test_document_problems(check, text: str, line: int, column: int, words: str) -> None:
    [problem] = check(text)
    assert (problem.line, problem.column, problem.rule) == (line, column, "document")
    assert words in problem.message


def test_other_groups_are_skipped(check) -> None:
    text = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: b}\n---\n"
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        "resources: [a.yaml]\n---\n"
        "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {name: x}\n"
        "spec: {whatever: 1}\n"
    )
    assert check(text) == []


# schema --------------------------------------------------------------------------------------


def test_unknown_fields_point_at_the_key(check) -> None:
    text = doc(
        "QueueTree", "  queues:\n  - name: a\n    quotas: {gpu: 1}\n    quota: {gpu: 1, tpu: 2}\n"
    )
    problems = check(text)
    assert [(p.line, p.column, p.rule, p.path) for p in problems] == [
        (8, 5, "schema", "queues[0].quotas"),
        (9, 21, "schema", "queues[0].quota.tpu"),
    ]
    assert "unknown field 'quotas'" in problems[0].message
    assert "allowed here:" in problems[0].message and "quota" in problems[0].message


@pytest.mark.parametrize(
    ("spec", "line", "column", "words"),
    [
        (
            "  queues:\n  - name: a\n    quota: {gpu: '2'}\n",
            8,
            18,
            "expected a number, got the string '2'",
        ),
        ("  queues:\n  - name: a\n    quota: {cpu: 2 cores}\n", 8, 18, "not a Kubernetes quantity"),
        ("  queues:\n  - name: a\n    quota: {memory: 5GB}\n", 8, 21, "not a Kubernetes quantity"),
        ("  queues:\n  - name: a\n    quota: {memory: true}\n", 8, 21, "got the boolean true"),
        ("  queues:\n  - name: a\n    priority: high\n", 8, 15, "expected an integer"),
        ("  queues:\n  - name: 7\n", 7, 11, "expected a string, got the number 7"),
        ("  queues:\n  - name: a\n    children: {name: b}\n", 8, 15, "expected a list"),
        ("  queues: []\n", 6, 11, "at least 1"),
        ("  queues:\n  - name: a\n    reclaimMinRuntime: 10 minutes\n", 8, 24, "duration"),
        ("  queues:\n  - name: a\n    namespaces: [Team_A]\n", 8, 18, "DNS-1123"),
        ("  queues:\n  - quota: {gpu: 1}\n", 7, 5, "missing required field 'name'"),
    ],
)
def test_schema_problems(check, spec: str, line: int, column: int, words: str) -> None:
    problems = check(doc("QueueTree", spec))
    assert [(p.line, p.column, p.rule) for p in problems] == [(line, column, "schema")], [
        p.text() for p in problems
    ]
    assert words in problems[0].message


def test_specific_rules_win_over_schema(check) -> None:
    text = doc(
        "QueueTree",
        "  queues:\n  - name: Bad\n    quota: {gpu: -2, cpu: '-3'}\n    priority: 1.5\n",
    )
    assert sorted(p.rule for p in check(text)) == ["name", "values", "values", "values"]


def test_raw_queue_schema(check) -> None:
    text = (
        "apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: q}\nspec:\n"
        "  resources:\n    gpu: {quota: '2', limit: -1, overQuotaWeight: 1}\n"
        "    cpu: {quota: 0, limit: -1, overQuotaWeight: 1, burst: 3}\n"
        "    memory: {quota: -5, limit: -1, overQuotaWeight: 1}\n"
    )
    assert [(p.line, p.rule) for p in check(text)] == [(6, "schema"), (7, "schema"), (8, "values")]


# topology and policy ------------------------------------------------------------------------


def test_topology_rules(check) -> None:
    text = doc(
        "TopologyPolicy",
        "  levels:\n"
        "  - nodeLabel: kubernetes.io/hostname\n"
        "  - nodeLabel: zone-label\n    alias: rack\n"
        "  - nodeLabel: zone-label\n"
        "  - nodeLabel: rack-label\n    alias: zone-label\n",
    )
    problems = check(text)
    assert [(p.line, p.column, p.rule) for p in problems] == [
        (7, 16, "topology"),
        (10, 16, "topology"),
        (12, 12, "topology"),
    ]
    same_name = (
        doc("TopologyPolicy", "  levels:\n  - nodeLabel: a\n", name="dc")
        + "---\n"
        + doc("Topology", "  levels:\n  - nodeLabel: b\n", name="dc", api="kai.scheduler/v1alpha1")
    )
    [problem] = check(same_name)
    assert (problem.rule, problem.line, problem.object) == ("topology", 12, "Topology/dc")


def test_topology_level_limits_are_schema(check) -> None:
    levels = "".join(f"  - nodeLabel: l{i}\n" for i in range(17))
    [problem] = check(doc("TopologyPolicy", "  levels:\n" + levels))
    assert problem.rule == "schema" and "at most 16" in problem.message


def test_policy_rules(check) -> None:
    text = (
        doc("SharingPolicy", "  nodePool: pool-a\n  modes: [fraction]\n", name="a")
        + "---\n"
        + doc("SharingPolicy", "  nodePool: pool-a\n", name="b")
        + "---\n"
        + doc("SharingPolicy", "  nodePool: pool-b\n  modes: [fraction, fraction]\n", name="c")
        + "---\n"
        + doc(
            "SchedulerPolicy",
            "  placementStrategy: {gpu: spread}\n  actions:\n    consolidation: {enabled: true}\n",
            name="s",
        )
    )
    problems = check(text)
    assert [(p.line, p.rule, p.severity) for p in problems] == [
        (14, "policy", "error"),
        (22, "schema", "error"),
        (31, "policy", "warning"),
    ]


@pytest.mark.parametrize(
    "spec",
    [
        "  placementStrategy: {gpu: pack}\n",
        "  actions: {shuffle: {enabled: true}}\n",
        "  fairshare: {windowType: hourly}\n",
        "  fairshare: {kValue: -1}\n",
        "  queueDepthPerAction: {allocate: 0}\n",
        "  reclaimerUtilizationMultiplier: 0.5\n",
        "  minRuntime: {reclaimResolveMethod: tree}\n",
        "  plugins: {proportion: {arguments: {k: 1}}}\n",
    ],
)
def test_scheduler_policy_schema(check, spec: str) -> None:
    [problem] = check(doc("SchedulerPolicy", spec))
    assert problem.rule == "schema" and problem.line == 6


def test_non_finite_numbers_are_schema_errors(check) -> None:
    problems = check(
        doc("QueueTree", "  queues:\n  - name: q\n    quota: {gpu: .inf}\n    priority: .nan\n")
    )
    assert [(p.line, p.column, p.rule) for p in problems] == [(8, 18, "schema"), (9, 15, "schema")]
    assert "finite" in problems[0].message


def test_the_same_object_twice_is_a_document_error(check) -> None:
    text = (
        doc("QueueTree", "  queues:\n  - name: a\n", name="t")
        + "---\n"
        + doc("QueueTree", "  queues:\n  - name: b\n", name="t")
        + "---\n"
        + doc("SharingPolicy", "  nodePool: x\n", name="t")
    )
    [problem] = check(text)
    assert (problem.rule, problem.line, problem.column, problem.path) == (
        "document",
        12,
        9,
        "metadata.name",
    )
    assert "already defined at t.yaml:4" in problem.message


def test_example_documents_parse_with_their_models() -> None:
    from pathlib import Path

    from kai.gitops.loader import load_paths
    from kai.gitops.validate import validate

    examples = Path(__file__).resolve().parents[3] / "examples" / "gitops"
    report = validate(load_paths([str(examples)]))
    assert report.ok
    kinds = set()
    for document in report.documents:
        info = lookup(document.api_version or "", document.kind or "")
        assert info is not None
        info.model.model_validate(document.data)
        kinds.add(document.kind)
    assert kinds == {"QueueTree", "Queue", "TopologyPolicy", "SharingPolicy", "SchedulerPolicy"}
