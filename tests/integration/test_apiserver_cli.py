"""`kai apiserver` as a process: HTTPS with a generated CA in the kubeconfig, usable by the
Python client and kubectl, clean exit 0 on SIGTERM; bad flags exit 2."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys

import pytest
from kubernetes import client, config


def _kai() -> list[str]:
    exe = shutil.which("kai", path=str(__import__("pathlib").Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "kai.cli"]


@pytest.fixture
def served(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [*_kai(), "apiserver", "--tls", "--kubeconfig-out", str(kubeconfig)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = [proc.stdout.readline().strip(), proc.stdout.readline().strip()]
    assert lines[0] == f"kubeconfig: {kubeconfig}", (lines, proc.stderr.read())
    scheme = "https"
    assert lines[1].startswith(f"serving: {scheme}://127.0.0.1:")
    yield proc, kubeconfig
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_tls_server_for_client_and_kubectl(served, kubectl):
    proc, kubeconfig = served
    api = config.new_client_from_config(str(kubeconfig))
    v1 = client.CoreV1Api(api)
    v1.create_namespaced_config_map("default", {"metadata": {"name": "over-tls"}})
    assert v1.read_namespaced_config_map("over-tls", "default").metadata.uid
    api.close()
    out = subprocess.run(
        [kubectl, "--kubeconfig", str(kubeconfig), "get", "cm", "over-tls"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and "over-tls" in out.stdout, out.stderr
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0


def test_bad_flag_exits_2():
    out = subprocess.run(
        [*_kai(), "apiserver", "--fault-error-rate", "3"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "must be between 0 and 1" in out.stderr


@pytest.mark.parametrize(("host", "warned"), [("127.0.0.1", False), ("0.0.0.0", True)])
def test_a_non_loopback_host_is_warned_about(tmp_path, host, warned):
    proc = subprocess.Popen(
        [*_kai(), "apiserver", "--host", host, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().startswith("serving: https://")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert ("is not a loopback address" in err) == warned, err
    if warned:
        assert "its token" in err


def test_is_loopback():
    from kai.commands.apiserver import is_loopback

    assert all(is_loopback(h) for h in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.1", "example.com"))
