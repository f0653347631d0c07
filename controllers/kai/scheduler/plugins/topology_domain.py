"""The topology domain slot: nodes outside the domain a topology-constrained group was given
(or, for a victim's move, its own node) are charged here. The mask is the caller's
(``PlacementEngine.choose(task, allowed)``); the slot only fixes its place among the reasons."""

from __future__ import annotations

from kai.scheduler.framework import DomainFilter
from kai.scheduler.predicates import OUTSIDE_DOMAIN

TOPOLOGY_DOMAIN = DomainFilter("topology-domain", OUTSIDE_DOMAIN)
