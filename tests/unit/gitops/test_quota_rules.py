"""The hierarchy rules, each in a valid and an invalid form, with exact line and column."""

from __future__ import annotations

import textwrap
from fractions import Fraction

from kai.gitops.problems import Problem, Source
from kai.gitops.quota_rules import Amount, QueueRecord, check_queues, format_amount

HEAD = """\
apiVersion: gitops.kai.scheduler/v1alpha1
kind: QueueTree
metadata:
  name: research
spec:
"""


def tree(body: str) -> str:
    return HEAD + textwrap.indent(textwrap.dedent(body), "  ")


def at(text: str, line_has: str, token: str, nth: int = 1) -> tuple[int, int]:
    """1-based (line, column) of ``token`` on the ``nth`` line containing ``line_has``: its last
    occurrence inside ``line_has`` if it is part of it, else its first one after it."""
    seen = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if line_has in line:
            seen += 1
            if seen == nth:
                start = line.index(line_has)
                if token in line_has:
                    return number, start + line_has.rindex(token) + 1
                return number, line.index(token, start) + 1
    raise AssertionError(f"{line_has!r} not in text")


def found(problems: list[Problem], rule: str) -> list[tuple[int, int]]:
    return [(p.line, p.column) for p in problems if p.rule == rule]


def only(problems: list[Problem], rule: str) -> list[tuple[int, int]]:
    assert {p.rule for p in problems} <= {rule}, [p.text() for p in problems]
    return found(problems, rule)


GOOD = tree(
    """\
    queues:
    - name: research
      quota: {gpu: 64, cpu: "512", memory: 2Ti}
      limit: {gpu: 96}
      children:
      - name: nlp
        quota: {gpu: 32, cpu: 256, memory: 1Ti}
        limit: {gpu: 64}
        namespaces: [team-nlp]
      - name: vision
        quota: {gpu: 32, cpu: "256000m", memory: 1024Gi}
        namespaces: [team-vision]
    """
)


def test_a_correct_tree_has_no_problems(check) -> None:
    assert check(GOOD) == []


def test_example_from_the_contract(check) -> None:
    text = tree(
        """\
        queues:
        - name: research
          quota: {gpu: 64}
          children:
          - name: cv
            quota: {gpu: 8}
          - name: nlp
            quota: {gpu: 16}
            limit: {gpu: 8}
        """
    )
    [problem] = check(text, "queues/research.yaml")
    line, column = at(text, "limit: {gpu: 8}", "8")
    assert problem.text() == (
        f"queues/research.yaml:{line}:{column}: error: [limit-below-quota] QueueTree/research "
        "queues[0].children[1] (nlp) limit.gpu: limit 8 is below quota 16"
    )


# name ----------------------------------------------------------------------------------------


def test_name_must_be_dns_label(check) -> None:
    text = tree("queues:\n- name: Research_1\n- name: ok-name\n- name: '-bad'\n")
    assert only(check(text), "name") == [at(text, "Research_1", "R"), at(text, "'-bad'", "'-")]


def test_name_too_long(check) -> None:
    text = tree(f"queues:\n- name: {'a' * 64}\n- name: {'b' * 63}\n")
    assert only(check(text), "name") == [(7, 11)]


def test_duplicate_name_reported_at_second_occurrence_across_documents(check) -> None:
    text = (
        tree("queues:\n- name: a\n  children:\n  - name: b\n")
        + "---\n"
        + tree("queues:\n- name: b\n").replace("name: research", "name: other")
    )
    [problem] = check(text)
    assert problem.rule == "name"
    assert (problem.line, problem.column) == at(text, "- name: b", "b", nth=2)
    assert problem.object == "QueueTree/other"


def test_duplicate_between_tree_and_raw_queue(check) -> None:
    text = tree("queues:\n- name: a\n") + "---\n" + RAW.format(name="a", extra="")
    assert only(check(text), "name") == [at(text, "name: a", "a", nth=2)]


# parent-exists ---------------------------------------------------------------------------------


def test_parent_exists(check) -> None:
    text = tree("parent: nowhere\nqueues:\n- name: a\n- name: b\n")
    problems = check(text)
    assert only(problems, "parent-exists") == [at(text, "parent: nowhere", "nowhere")]
    assert problems[0].path == "parent"
    fixed = (
        text.replace("parent: nowhere", "parent: top")
        + "---\n"
        + tree("queues:\n- name: top\n").replace("name: research", "name: root")
    )
    assert check(fixed) == []


def test_parent_exists_raw_queue_with_suggestion(check) -> None:
    text = (
        RAW.format(name="child", extra="  parentQueue: defualt-queue\n")
        + "---\n"
        + RAW.format(name="default-queue", extra="")
    )
    [problem] = check(text)
    assert (problem.rule, problem.path) == ("parent-exists", "parentQueue")
    assert (problem.line, problem.column) == at(text, "parentQueue", "defualt")
    assert "did you mean 'default-queue'" in problem.message


# cycle -----------------------------------------------------------------------------------------


def test_cycle_reported_once_at_first_member_in_file_order(check) -> None:
    text = (
        RAW.format(name="a", extra="  parentQueue: b\n")
        + "---\n"
        + RAW.format(name="b", extra="  parentQueue: c\n")
        + "---\n"
        + RAW.format(name="c", extra="  parentQueue: a\n")
    )
    [problem] = check(text)
    assert problem.rule == "cycle"
    assert (problem.line, problem.column) == at(text, "parentQueue: b", "b")
    assert "a -> b -> c -> a" in problem.message


def test_self_parent_and_tree_attached_to_its_own_queue(check) -> None:
    text = RAW.format(name="solo", extra="  parentQueue: solo\n")
    assert only(check(text), "cycle") == [at(text, "parentQueue: solo", "solo")]
    text = tree("parent: leaf\nqueues:\n- name: top\n  children:\n  - name: leaf\n")
    assert only(check(text), "cycle") == [at(text, "parent: leaf", "leaf")]


def test_two_cycles_two_problems(check) -> None:
    text = "---\n".join(
        RAW.format(name=n, extra=f"  parentQueue: {p}\n")
        for n, p in (("a", "b"), ("b", "a"), ("c", "d"), ("d", "c"))
    )
    assert only(check(text), "cycle") == [
        at(text, "parentQueue: b", "b"),
        at(text, "parentQueue: d", "d"),
    ]


# values ----------------------------------------------------------------------------------------


def test_values(check) -> None:
    text = tree(
        """\
        queues:
        - name: a
          quota: {gpu: -2, cpu: "-500m", memory: -1}
          limit: {gpu: -1, cpu: "-1", memory: "-3Gi"}
          overQuotaWeight: {gpu: -0.5, cpu: 0}
          priority: 1.5
        """
    )
    problems = check(text)
    assert only(problems, "values") == [
        at(text, "quota:", "-2"),
        at(text, "quota:", '"-500m"'),
        at(text, "limit:", '"-3Gi"'),
        at(text, "overQuotaWeight", "-0.5"),
        at(text, "priority", "1.5"),
    ]
    assert "must be -1 (unlimited) or at least 0, got -2" in problems[0].message


def test_bad_default_reported_once_at_the_default(check) -> None:
    text = tree("defaults:\n  quota: {gpu: -3}\nqueues:\n- name: a\n- name: b\n")
    problems = check(text)
    assert only(problems, "values") == [at(text, "gpu: -3", "-3")]
    assert problems[0].path == "defaults.quota.gpu"


def test_priority_integer_is_fine(check) -> None:
    assert check(tree("queues:\n- name: a\n  priority: 7\n")) == []


# limit-below-quota --------------------------------------------------------------------------


def test_limit_below_quota_forms(check) -> None:
    text = tree(
        """\
        queues:
        - name: a
          quota: {gpu: 4, cpu: "2", memory: 1Gi}
          limit: {gpu: 4, cpu: 1500m, memory: 1023Mi}
        - name: b
          quota: {gpu: -1}
          limit: {gpu: 8}
        - name: c
          quota: {gpu: 100}
          limit: {gpu: -1}
        """
    )
    problems = check(text)
    assert only(problems, "limit-below-quota") == [
        at(text, "limit: {gpu: 4", "1500m"),
        at(text, "limit: {gpu: 4", "1023Mi"),
        at(text, "limit: {gpu: 8}", "8"),
    ]
    assert "limit 1500m is below quota 2" in problems[0].message
    assert "quota -1" in problems[2].message


def test_limit_below_quota_with_defaults(check) -> None:
    text = tree("defaults:\n  limit: {gpu: 8}\nqueues:\n- name: a\n  quota: {gpu: 16}\n")
    [problem] = check(text)
    assert problem.rule == "limit-below-quota"
    # The queue writes the quota, the limit comes from the defaults: point at the quota.
    assert (problem.line, problem.column) == at(text, "quota: {gpu: 16}", "16")
    assert "from spec.defaults" in problem.message


# children-quota-sum ---------------------------------------------------------------------------


def test_children_quota_sum(check) -> None:
    text = tree(
        """\
        queues:
        - name: p
          quota: {gpu: 10, cpu: "1", memory: 1Gi}
          children:
          - name: a
            quota: {gpu: 6, cpu: 600m, memory: 512Mi}
          - name: b
            quota: {gpu: 5, cpu: 400m, memory: 512Mi}
        """
    )
    problems = check(text)
    assert only(problems, "children-quota-sum") == [at(text, "quota: {gpu: 10", "10")]
    assert "sum to 11 (a 6, b 5), above the parent's quota 10" in problems[0].message


def test_children_quota_sum_parent_without_quota_points_at_entry(check) -> None:
    text = tree("queues:\n- name: p\n  children:\n  - name: a\n    quota: {gpu: 1}\n")
    assert only(check(text), "children-quota-sum") == [at(text, "- name: p", "name")]


def test_children_quota_sum_exact_fractions(check) -> None:
    text = tree(
        "queues:\n- name: p\n  quota: {gpu: 0.3}\n  children:\n"
        "  - name: a\n    quota: {gpu: 0.1}\n  - name: b\n    quota: {gpu: 0.2}\n"
    )
    assert check(text) == []
    assert check(text.replace("gpu: 0.2}", "gpu: 0.2000001}"))[0].rule == "children-quota-sum"


def test_minus_one_children(check) -> None:
    lone = tree(
        "queues:\n- name: p\n  quota: {gpu: 8}\n  children:\n  - name: a\n    quota: {gpu: -1}\n"
    )
    assert check(lone) == []
    with_zero = lone + "    - name: b\n      quota: {gpu: 0}\n"
    assert check(with_zero) == []
    with_sibling = lone + "    - name: b\n      quota: {gpu: 1}\n"
    assert only(check(with_sibling), "children-quota-sum") == [at(with_sibling, "gpu: 8", "8")]
    unlimited_parent = with_sibling.replace("quota: {gpu: 8}", "quota: {gpu: -1}")
    assert check(unlimited_parent) == []


# child-quota-over-parent-limit / child-limit-over-parent-limit -------------------------------


def test_child_quota_over_parent_limit(check) -> None:
    text = tree(
        """\
        queues:
        - name: p
          quota: {gpu: -1}
          limit: {gpu: 8}
          children:
          - name: a
            quota: {gpu: 9}
          - name: b
            quota: {gpu: -1}
          - name: c
            quota: {gpu: 8}
        """
    )
    problems = [p for p in check(text) if p.rule != "limit-below-quota"]
    assert only(problems, "child-quota-over-parent-limit") == [
        at(text, "quota: {gpu: 9}", "9"),
        at(text, "quota: {gpu: -1}", "-1", nth=2),
    ]


def test_child_limit_over_parent_limit_is_a_warning(check) -> None:
    text = tree(
        """\
        queues:
        - name: p
          limit: {gpu: 8}
          children:
          - name: a
            limit: {gpu: 9}
          - name: b
            limit: {gpu: -1}
          - name: c
            limit: {gpu: 8}
        """
    )
    problems = check(text)
    assert only(problems, "child-limit-over-parent-limit") == [at(text, "limit: {gpu: 9}", "9")]
    assert problems[0].severity == "warning"


# namespaces-on-leaf --------------------------------------------------------------------------


def test_namespaces_only_on_leaves_and_once(check) -> None:
    text = tree(
        """\
        queues:
        - name: p
          namespaces: [ns-p]
          children:
          - name: a
            namespaces: [ns-a, ns-shared]
          - name: b
            namespaces: [ns-b, ns-shared]
        """
    )
    assert only(check(text), "namespaces-on-leaf") == [
        at(text, "[ns-p]", "["),
        at(text, "[ns-b, ns-shared]", "ns-shared"),
    ]


def test_namespaces_on_a_queue_that_gets_children_from_another_tree(check) -> None:
    text = (
        tree("queues:\n- name: p\n  namespaces: [x]\n")
        + "---\n"
        + tree("parent: p\nqueues:\n- name: c\n").replace("name: research", "name: other")
    )
    assert only(check(text), "namespaces-on-leaf") == [at(text, "namespaces: [x]", "[")]


# over-capacity -------------------------------------------------------------------------------


def test_over_capacity_only_with_capacity(check) -> None:
    text = tree("queues:\n- name: a\n  quota: {gpu: 300}\n- name: b\n  quota: {gpu: 300}\n")
    assert check(text) == []
    cap = {"gpu": (Fraction(512), Source("cap.yaml", 1, 6))}
    [problem] = check(text, capacity=cap)
    assert (problem.file, problem.line, problem.column) == ("cap.yaml", 1, 6)
    assert (problem.rule, problem.severity) == ("over-capacity", "warning")
    assert check(text.replace("300", "256"), capacity=cap) == []


# raw KAI Queues ------------------------------------------------------------------------------

RAW = """\
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata:
  name: {name}
spec:
{extra}  resources:
    gpu: {{quota: 0, overQuotaWeight: 1, limit: -1}}
    cpu: {{quota: 0, overQuotaWeight: 1, limit: -1}}
    memory: {{quota: 0, overQuotaWeight: 1, limit: -1}}
"""


def test_raw_queue_units_mix_with_trees(check) -> None:
    # A KAI Queue's cpu is millicores and memory megabytes: 2000 m = 2 cores, 1000 MB = 1G.
    parent = (
        RAW.format(name="dept", extra="")
        .replace(
            "cpu: {quota: 0, overQuotaWeight: 1, limit: -1}",
            "cpu: {quota: 2000, overQuotaWeight: 1, limit: -1}",
        )
        .replace("memory: {quota: 0,", "memory: {quota: 1000,")
    )
    child = tree(
        "parent: dept\nqueues:\n- name: a\n  quota: {cpu: 1500m, memory: 600M}\n"
        "- name: b\n  quota: {cpu: 500m, memory: 400M}\n"
    )
    assert check(parent + "---\n" + child) == []
    over = child.replace("400M", "400000001")
    text = parent + "---\n" + over
    assert only(check(text), "children-quota-sum") == [at(text, "memory: {quota: 1000", "1000")]


def test_raw_queue_omitted_limit_warns_and_means_zero(check) -> None:
    text = (
        "apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: q}\nspec:\n"
        "  resources:\n    gpu: {quota: 2}\n    cpu: {quota: 0, limit: -1}\n"
        "    memory: {quota: 0, limit: -1}\n"
    )
    problems = check(text)
    assert [(p.rule, p.severity, p.line) for p in problems] == [
        ("values", "warning", 6),
        ("limit-below-quota", "error", 6),
    ]
    assert "KAI reads an omitted limit as 0" in problems[0].message


def test_raw_queue_without_resources_is_a_schema_error(check) -> None:
    text = (
        "apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: q}\nspec:\n  priority: 1\n"
    )
    [problem] = check(text)
    assert (problem.rule, problem.line, problem.path) == ("schema", 4, "resources")


# the pure interface ----------------------------------------------------------------------------


def test_check_queues_on_plain_records() -> None:
    here = Source("api", 1, 1)

    def amounts(**values: int) -> dict[str, Amount]:
        return {r: Amount(Fraction(v), here, f"quota.{r}") for r, v in values.items()}

    records = [
        QueueRecord(name="p", at=here, object="Queue/p", path="", quota=amounts(gpu=4)),
        QueueRecord(name="c", at=here, object="Queue/c", path="", parent="p", quota=amounts(gpu=5)),
    ]
    [problem] = check_queues(records)
    assert problem.rule == "children-quota-sum"


def test_format_amount() -> None:
    assert format_amount("cpu", Fraction(1, 2)) == "500m"
    assert format_amount("cpu", Fraction(3)) == "3"
    assert format_amount("memory", Fraction(64 * 2**30)) == "64Gi"
    assert format_amount("memory", Fraction(5 * 10**8)) == "500M"
    assert format_amount("gpu", Fraction(3, 10)) == "0.3"
    assert format_amount("gpu", Fraction(-1)) == "-1"


def test_records_from_objects_for_callers_without_yaml() -> None:
    from kai.gitops.queue_records import records_from_objects

    parent = {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": "p"},
        "spec": {"resources": {"gpu": {"quota": 1, "limit": -1, "overQuotaWeight": 1}}},
    }
    child = {
        "apiVersion": "gitops.kai.scheduler/v1alpha1",
        "kind": "QueueTree",
        "metadata": {"name": "t"},
        "spec": {"parent": "p", "queues": [{"name": "c", "quota": {"gpu": 2}}]},
    }
    problems = check_queues(records_from_objects([("<cluster>", parent), ("<request>", child)]))
    rules = sorted((p.rule, p.file, p.path) for p in problems)
    assert ("children-quota-sum", "<cluster>", "resources.gpu.quota") in rules
