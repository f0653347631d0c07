"""Write a kubeconfig that points kubectl and the Python client at a running server."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml


def kubeconfig_dict(
    url: str, ca_pem: bytes | None, context: str = "kai-sim", token: str | None = None
) -> dict[str, object]:
    """``token``: the server's bearer token; None for a server started without authentication,
    which ignores credentials: the user entry then names the fixed token ``kai-sim``, so that
    clients send the same kind of request to an open server as to one that checks tokens."""
    cluster: dict[str, object] = {"server": url}
    if ca_pem:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": cluster}],
        "users": [{"name": f"{context}-admin", "user": {"token": token or "kai-sim"}}],
        "contexts": [
            {
                "name": context,
                "context": {"cluster": context, "user": f"{context}-admin", "namespace": "default"},
            }
        ],
        "current-context": context,
        "preferences": {},
    }


def write_kubeconfig(
    path: Path,
    url: str,
    ca_pem: bytes | None,
    context: str = "kai-sim",
    token: str | None = None,
) -> Path:
    """Write atomically, readable by its owner only (it holds the token) from the start."""
    import os

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    text = yaml.safe_dump(kubeconfig_dict(url, ca_pem, context, token), sort_keys=False)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    tmp.chmod(0o600)
    tmp.replace(path)
    return path
