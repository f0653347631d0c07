"""Compiling documents: KAI units, defaults, raw Queues, Topologies, the ConfigMap."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from kai.gitops.compile import compile_documents, dump_objects
from kai.gitops.loader import load_text
from kai.gitops.validate import validate


def render(text: str) -> list[dict[str, Any]]:
    report = validate(load_text(textwrap.dedent(text), "t.yaml"))
    assert report.ok, [p.text() for p in report.problems]
    return compile_documents(report.documents)


def queue(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    [found] = [o for o in objects if o["kind"] == "Queue" and o["metadata"]["name"] == name]
    return found


def one_queue(quota: str) -> dict[str, Any]:
    text = f"""\
    apiVersion: gitops.kai.scheduler/v1alpha1
    kind: QueueTree
    metadata: {{name: t}}
    spec:
      queues:
      - name: q
        quota: {quota}
    """
    return queue(render(text), "q")["spec"]["resources"]


@pytest.mark.parametrize(
    ("quota", "resource", "expected"),
    [
        ('{cpu: "500m"}', "cpu", 500),
        ('{cpu: "0.0001"}', "cpu", 1),
        ("{cpu: 0.0001}", "cpu", 1),
        ("{cpu: 32}", "cpu", 32000),
        ('{cpu: "1e3"}', "cpu", 1000000),
        ("{cpu: 1500001u}", "cpu", 1501),
        ("{memory: 64Gi}", "memory", 68720),
        ("{memory: 2Ti}", "memory", 2199024),
        ("{memory: 512M}", "memory", 512),
        ("{memory: 1}", "memory", 1),
        ("{memory: 1000000}", "memory", 1),
        ("{memory: 1000001}", "memory", 2),
        ("{memory: -1}", "memory", -1),
        ("{gpu: 2}", "gpu", 2),
        ("{gpu: 0.5}", "gpu", 0.5),
        ("{gpu: -1}", "gpu", -1),
    ],
)
def test_kai_units(quota: str, resource: str, expected: float) -> None:
    value = one_queue(quota)[resource]["quota"]
    assert value == expected and type(value) is type(expected)


def test_every_field_spelled_out_with_defaults_merged() -> None:
    objects = render(
        """\
        apiVersion: gitops.kai.scheduler/v1alpha1
        kind: QueueTree
        metadata: {name: t}
        spec:
          parent: dept
          defaults:
            limit: {gpu: 16, cpu: "64", memory: 256Gi}
            overQuotaWeight: {gpu: 2}
            priority: 120
            reclaimMinRuntime: 5m
          queues:
          - name: team
            displayName: The Team
            limit: {gpu: 12}
            children:
            - name: leaf
              priority: 80
              namespaces: [ns-b, ns-a]
        ---
        apiVersion: gitops.kai.scheduler/v1alpha1
        kind: QueueTree
        metadata: {name: top}
        spec:
          queues:
          - name: dept
        """
    )
    team = queue(objects, "team")
    assert team["spec"] == {
        "displayName": "The Team",
        "parentQueue": "dept",
        "priority": 120,
        "reclaimMinRuntime": "5m",
        "resources": {
            "gpu": {"quota": 0, "overQuotaWeight": 2, "limit": 12},
            "cpu": {"quota": 0, "overQuotaWeight": 1, "limit": 64000},
            "memory": {"quota": 0, "overQuotaWeight": 1, "limit": 274878},
        },
    }
    assert team["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "kai"}
    assert team["metadata"]["annotations"]["gitops.kai.scheduler/source"] == "QueueTree/t"
    leaf = queue(objects, "leaf")
    assert leaf["spec"]["parentQueue"] == "team" and leaf["spec"]["priority"] == 80
    dept = queue(objects, "dept")
    assert "parentQueue" not in dept["spec"]
    assert dept["spec"]["resources"]["gpu"] == {"quota": 0, "overQuotaWeight": 1, "limit": -1}
    [configmap] = [o for o in objects if o["kind"] == "ConfigMap"]
    assert configmap["data"]["namespace-queues.yaml"] == "ns-a: leaf\nns-b: leaf\n"


def test_raw_queue_normalised_with_kai_meaning() -> None:
    objects = render(
        """\
        apiVersion: scheduling.run.ai/v2
        kind: Queue
        metadata:
          name: q
          labels: {team: a}
        spec:
          resources:
            gpu: {quota: 1.5, limit: 2}
            cpu: {quota: 1000, limit: -1, overQuotaWeight: 3}
            memory: {quota: 0, limit: -1}
        status: {childQueues: []}
        """
    )
    [q] = objects
    assert "status" not in q
    assert q["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "kai", "team": "a"}
    assert q["spec"] == {
        "priority": 100,
        "resources": {
            "gpu": {"quota": 1.5, "overQuotaWeight": 0, "limit": 2},
            "cpu": {"quota": 1000, "overQuotaWeight": 3, "limit": -1},
            "memory": {"quota": 0, "overQuotaWeight": 0, "limit": -1},
        },
    }


def test_topologies_and_configmap() -> None:
    objects = render(
        """\
        apiVersion: gitops.kai.scheduler/v1alpha1
        kind: TopologyPolicy
        metadata: {name: dc}
        spec:
          levels:
          - {nodeLabel: topology.kubernetes.io/zone, alias: zone}
          - {nodeLabel: kubernetes.io/hostname}
        ---
        apiVersion: kai.scheduler/v1alpha1
        kind: Topology
        metadata: {name: raw}
        spec:
          levels: [{nodeLabel: rack}]
        ---
        apiVersion: gitops.kai.scheduler/v1alpha1
        kind: SchedulerPolicy
        metadata: {name: default}
        spec:
          placementStrategy: {gpu: spread}
          actions: {preempt: {priority: 600}, stalegangeviction: {enabled: false}}
          fairshare: {kValue: 2}
        ---
        apiVersion: gitops.kai.scheduler/v1alpha1
        kind: SharingPolicy
        metadata: {name: pool}
        spec: {modes: [fraction]}
        """
    )
    kinds = [(o["kind"], o["metadata"]["name"]) for o in objects]
    assert kinds == [("Topology", "dc"), ("Topology", "raw"), ("ConfigMap", "kai-scheduler-config")]
    assert objects[0]["spec"] == {
        "levels": [
            {"nodeLabel": "topology.kubernetes.io/zone", "alias": "zone"},
            {"nodeLabel": "kubernetes.io/hostname"},
        ]
    }
    configmap = objects[2]
    assert configmap["metadata"]["namespace"] == "kai-scheduler"
    assert sorted(configmap["data"]) == [
        "scheduler-policy.default.yaml",
        "sharing-policy.pool.yaml",
    ]
    settings = configmap["data"]["scheduler-policy.default.yaml"]
    # preempt moved first, consolidation off under spread, stale-gang eviction disabled
    assert "actions:\n- preempt\n- allocate\n- reclaim\nplugins" in settings
    assert "kValue: 2\n" in settings and "staleGangGracePeriod: 60s" in settings
    text = dump_objects(objects)
    assert text.startswith("---\napiVersion: kai.scheduler/v1alpha1\nkind: Topology\n")
    assert "scheduler-policy.default.yaml: |\n    name: default\n" in text


def test_no_configmap_without_policies() -> None:
    objects = render(
        "apiVersion: gitops.kai.scheduler/v1alpha1\nkind: QueueTree\nmetadata: {name: t}\n"
        "spec:\n  queues:\n  - name: q\n"
    )
    assert [o["kind"] for o in objects] == ["Queue"]


def test_output_does_not_depend_on_document_order() -> None:
    a = (
        "apiVersion: gitops.kai.scheduler/v1alpha1\nkind: QueueTree\nmetadata: {name: a}\n"
        "spec:\n  queues:\n  - name: qa\n"
    )
    b = a.replace("name: a}", "name: b}").replace("qa", "qb")
    first = dump_objects(render(a + "---\n" + b))
    assert first == dump_objects(render(b + "---\n" + a))
