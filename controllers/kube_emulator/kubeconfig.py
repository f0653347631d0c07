"""Write a kubeconfig that points kubectl and the Python client at a running server."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml


def kubeconfig_dict(url: str, ca_pem: bytes | None, context: str = "kai-sim") -> dict[str, object]:
    cluster: dict[str, object] = {"server": url}
    if ca_pem:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": cluster}],
        # The embedded server does not authenticate; a token keeps clients that insist on
        # some credential happy.
        "users": [{"name": f"{context}-admin", "user": {"token": "kai-sim"}}],
        "contexts": [
            {
                "name": context,
                "context": {"cluster": context, "user": f"{context}-admin", "namespace": "default"},
            }
        ],
        "current-context": context,
        "preferences": {},
    }


def write_kubeconfig(path: Path, url: str, ca_pem: bytes | None, context: str = "kai-sim") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(yaml.safe_dump(kubeconfig_dict(url, ca_pem, context), sort_keys=False))
    tmp.chmod(0o600)
    tmp.replace(path)
    return path
