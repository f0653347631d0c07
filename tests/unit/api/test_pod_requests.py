"""Effective pod requests with native sidecars (Kubernetes' rule)."""

from __future__ import annotations

from fractions import Fraction

from kai.api.pod_requests import effective_requests


def test_main_containers_and_sidecars_are_summed_init_containers_maxed() -> None:
    total = effective_requests(
        [{"cpu": 2.0}, {"cpu": 1.0}],
        [({"cpu": 5.0}, False), ({"cpu": 1.0, "memory": 10.0}, True)],
        0.0,
    )
    assert total == {"cpu": 5.0, "memory": 10.0}  # max(2+1+1, 5): the plain init container


def test_a_sidecar_runs_next_to_later_init_containers() -> None:
    total = effective_requests(
        [{"cpu": Fraction(1)}],
        [({"cpu": Fraction(2)}, True), ({"cpu": Fraction(3)}, False)],
        Fraction(0),
    )
    assert total == {"cpu": Fraction(5)}  # the init container (3) runs next to the sidecar (2)


def test_an_init_container_before_the_sidecar_does_not_add_it() -> None:
    total = effective_requests([{"cpu": 1.0}], [({"cpu": 3.0}, False), ({"cpu": 2.0}, True)], 0.0)
    assert total == {"cpu": 3.0}  # max(1 + 2, 3)
