"""The lean keep-alive client of ``Kube`` over TLS: with the embedded server's ``--tls`` and
against a real kube-apiserver, with a client certificate (the admin kubeconfig) and with a
ServiceAccount's bearer token, as every real cluster is reached."""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers.real_cluster import RealCluster
from kai.kube.client import ApiError, ConfigError, Kube, TransientError, load_api_client
from kai.kube.resources import CONFIGMAPS, NAMESPACES, PODS
from kai.kube.writes import create_if_absent
from kube_emulator import ApiServer
from kube_emulator.options import ServerOptions


def _round_trip(kube: Kube, namespace: str) -> None:
    create_if_absent(
        kube, NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    )
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cm", "namespace": namespace},
    }
    created = kube.create(CONFIGMAPS, body)
    assert created["metadata"]["uid"]
    patched = kube.patch(CONFIGMAPS, "cm", {"data": {"a": "1"}}, namespace)
    assert patched["data"] == {"a": "1"}
    assert kube.get(CONFIGMAPS, "cm", namespace)["data"] == {"a": "1"}
    with pytest.raises(ApiError) as err:
        kube.get(CONFIGMAPS, "missing", namespace)
    assert err.value.status == 404
    # many threads at once: each has its own kept-alive TLS connection
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            for j in range(5):
                kube.patch(CONFIGMAPS, "cm", {"data": {f"t{i}": str(j)}}, namespace)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert kube.get(CONFIGMAPS, "cm", namespace)["data"]["t7"] == "4"


@pytest.fixture
def tls_server() -> Iterator[ApiServer]:
    server = ApiServer(options=ServerOptions(tls=True)).start()
    yield server
    server.stop()


def test_embedded_tls_server_goes_through_the_lean_path(
    tls_server: ApiServer, tmp_path: Path
) -> None:
    kube = Kube.from_kubeconfig(str(tls_server.write_kubeconfig(tmp_path / "kubeconfig")))
    try:
        assert kube._plain is not None and kube._plain.tls is not None
        _round_trip(kube, "tls")
    finally:
        kube.close()


def test_a_server_certificate_from_another_ca_is_refused(
    tls_server: ApiServer, tmp_path: Path
) -> None:
    other = ApiServer(options=ServerOptions(tls=True)).start()
    try:
        config = yaml.safe_load(tls_server.write_kubeconfig(tmp_path / "a").read_text())
        foreign = yaml.safe_load(other.write_kubeconfig(tmp_path / "b").read_text())
        # the first server's address, the second server's CA
        config["clusters"][0]["cluster"]["certificate-authority-data"] = foreign["clusters"][0][
            "cluster"
        ]["certificate-authority-data"]
        (tmp_path / "mixed").write_text(yaml.safe_dump(config))
        kube = Kube.from_kubeconfig(str(tmp_path / "mixed"))
        with pytest.raises(TransientError, match="CERTIFICATE_VERIFY_FAILED"):
            kube.get(PODS, "p", "default")
    finally:
        other.stop()


def test_an_unreadable_client_certificate_is_a_config_error(
    tls_server: ApiServer, tmp_path: Path
) -> None:
    api = load_api_client(str(tls_server.write_kubeconfig(tmp_path / "kubeconfig")))
    api.configuration.cert_file = str(tmp_path / "missing.crt")
    api.configuration.key_file = str(tmp_path / "missing.key")
    with pytest.raises(ConfigError, match=r"missing\.crt"):
        Kube(api)


def _token_kubeconfig(kube: Kube, admin: Path, path: Path) -> Path:
    """A kubeconfig as a pod of a fresh ServiceAccount has: the server, its CA, a bound token."""
    from kai.kube.client import Resource

    sas = Resource("", "v1", "serviceaccounts", True, "ServiceAccount")
    create_if_absent(
        kube,
        sas,
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "lean", "namespace": "default"},
        },
    )
    answer = kube.request(
        "POST",
        sas.path("default", "lean", "token"),
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    config = yaml.safe_load(admin.read_text())
    cluster = config["clusters"][0]["cluster"]
    ca = cluster.get("certificate-authority-data")
    if ca is None:
        ca = base64.b64encode(Path(cluster["certificate-authority"]).read_bytes()).decode()
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": {"server": cluster["server"], "certificate-authority-data": ca},
            }
        ],
        "users": [{"name": "u", "user": {"token": answer["status"]["token"]}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def test_real_server_with_client_certificate_and_with_bearer_token(
    real_cluster: RealCluster, tmp_path: Path
) -> None:
    admin = Kube.from_kubeconfig(str(real_cluster.kubeconfig))
    assert admin._plain is not None and admin._plain.tls is not None
    assert admin.api.configuration.cert_file  # the admin user is a client certificate
    _round_trip(admin, "lean-tls")
    token = Kube.from_kubeconfig(
        str(_token_kubeconfig(admin, real_cluster.kubeconfig, tmp_path / "t"))
    )
    assert token._plain is not None and token._plain.tls is not None
    assert not token.api.configuration.cert_file
    # the token is sent: the server knows who asks (a ServiceAccount without rights: 403)
    with pytest.raises(ApiError) as err:
        token.list(CONFIGMAPS, "lean-tls")
    assert err.value.status == 403
    assert "system:serviceaccount:default:lean" in err.value.message
    admin.close()
    token.close()
