"""Create-only review resources that clients use to ask about themselves: access reviews
(``kubectl auth can-i``) and ``kubectl auth whoami``. The embedded server has no authorization,
so every request is allowed and every caller is the same administrator."""

from __future__ import annotations

from typing import Any

from kube_emulator.errors import bad_request

USER = {"username": "kai-sim-admin", "groups": ["system:masters", "system:authenticated"]}

REVIEW_KINDS = {
    ("authorization.k8s.io", "selfsubjectaccessreviews"),
    ("authorization.k8s.io", "subjectaccessreviews"),
    ("authorization.k8s.io", "selfsubjectrulesreviews"),
    ("authentication.k8s.io", "selfsubjectreviews"),
}


def review(group: str, plural: str, kind: str, api_version: str, body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise bad_request(f"the body of the request must be a {kind} object")
    out = {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": body.get("metadata") or {},
        "spec": body.get("spec") or {},
    }
    if plural == "selfsubjectrulesreviews":
        out["status"] = {
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": False,
        }
    elif plural == "selfsubjectreviews":
        out.pop("spec")
        out["status"] = {"userInfo": USER}
    else:
        out["status"] = {
            "allowed": True,
            "reason": "the embedded API server authorizes every request",
        }
    return out
