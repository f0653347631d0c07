"""Admission latency of ``kai webhook`` as the real kube-apiserver sees it (issue 13).

Open-loop load: pod creates (``dryRun=All``: the whole admission chain, no etcd write) sent at
a fixed rate, each pod a fractional-GPU pod for kai (so both pod webhooks run on every request:
the mutation and the validation). Latency is measured from the moment a request was *due*, not
sent (no coordinated omission).

Each round runs three phases at the same rate against the same API server, one after the other
(a control experiment):

- ``none``: no webhook configuration at all (the API server and the machine alone);
- ``null``: the cheapest webhook Python can be, registered exactly like kai's (the same
  configurations from :func:`kai.webhooks.registration.configurations`: rules, match
  conditions, namespace selector, failure policy, timeouts) but pointing at a tiny HTTP/2 server
  of this script that answers every AdmissionReview ``allowed: true`` with a fixed body (only
  the request's uid copied in), on the connection's own thread;
- ``null-patch`` (with ``--phases``, and with ``--direct``): the same null webhook, but its
  answer to the mutating call carries exactly the JSON patch kai returns for the benchmark pod
  (asked of ``kai webhook`` once, then pre-encoded: the same bytes every time). What it adds
  to ``null`` is what the mutation itself costs the API server (decoding and applying the
  patch); what ``kai`` adds to ``null-patch`` is kai's own cost;
- ``kai``: ``kai webhook`` as its own process (as in a cluster), same configurations;
- ``base`` (with ``--base-tree DIR``): the ``kai webhook`` of another checkout (e.g. ``main``),
  to compare a change with what it changes in the same run.

What ``null`` adds to ``none`` is the price of *any* webhook on this API server and machine
(two more TLS/HTTP/2 calls per pod, encoding AdmissionReviews); ``null-patch`` adds applying
kai's patch; what ``kai`` adds to ``null-patch`` is kai's own. Views of each phase:

- client: the pod create's round trip (p50/p90/p99/max) and the rate reached;
- CPU of each process (``/proc/PID/stat`` deltas): kube-apiserver, etcd, the webhook, the load
  generator; CPU per webhook call;
- the API server's ``apiserver_admission_webhook_admission_duration_seconds`` (coarse
  buckets: 5, 25, 100 ms ...) and the webhook's ``kai_webhook_request_duration_milliseconds``
  (arrival to answer).

The load generator is one process speaking HTTP/2 to the API server on one TLS connection
(client certificate of the kubeconfig), with pre-encoded bodies and a single-threaded loop: its
CPU is printed with the others, since it shares the machine.

    .venv/bin/python bench/bench_webhook.py                    # starts a real control plane
                                                               # (up.sh/down.sh in $KAI_REAL_K8S)
    .venv/bin/python bench/bench_webhook.py --kubeconfig FILE  # or uses a running one
    .venv/bin/python bench/bench_webhook.py --rate 500 --seconds 20 --repeat 3
    .venv/bin/python bench/bench_webhook.py --base-tree ../main --phases null,base,kai
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import re
import select
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "team-nlp"
PHASES = ("none", "null", "kai")  # the default phases; also null-patch, kai-python, base
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# -- statistics ----------------------------------------------------------------------------------
def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _histogram(text: str, metric: str, match: str) -> dict[float, float]:
    """Cumulative bucket counts ``le -> count`` of the series whose labels contain ``match``."""
    out: dict[float, float] = {}
    for line in text.splitlines():
        if not line.startswith(metric + "_bucket{") or match not in line:
            continue
        le = re.search(r'le="([^"]+)"', line)
        if le is None:
            continue
        bound = float("inf") if le[1] == "+Inf" else float(le[1])
        out[bound] = out.get(bound, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def _delta(after: dict[float, float], before: dict[float, float]) -> dict[float, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


def _bucket_share(hist: dict[float, float], bound: float) -> str:
    total = hist.get(float("inf"), 0.0)
    if not total:
        return "-"
    under = max((v for k, v in hist.items() if k <= bound), default=0.0)
    return f"{100 * under / total:.1f} %"


def _bucket_quantile(hist: dict[float, float], q: float) -> float:
    """The upper bound of the bucket holding quantile ``q`` (what buckets can tell)."""
    total = hist.get(float("inf"), 0.0)
    for bound in sorted(hist):
        if hist[bound] >= q * total:
            return bound
    return float("inf")


# -- processes and their CPU ---------------------------------------------------------------------
def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def _find_process(*needles: str) -> int | None:
    """The process whose command line holds every needle (e.g. the binary and its port)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        args = _cmdline(int(entry))
        text = " ".join(args)
        if args and all(n in text for n in needles):
            return int(entry)
    return None


def control_plane_pids(server: str) -> dict[str, int]:
    """kube-apiserver (by its secure port) and its etcd (by the client URL it uses)."""
    port = urlsplit(server).port or 443
    pids: dict[str, int] = {}
    api = _find_process("kube-apiserver", f"--secure-port={port}")
    if api is None:
        return pids
    pids["kube-apiserver"] = api
    etcd_url = next(
        (a.split("=", 1)[1] for a in _cmdline(api) if a.startswith("--etcd-servers=")), ""
    )
    etcd_port = urlsplit(etcd_url.split(",")[0]).port if etcd_url else None
    if etcd_port:
        etcd = _find_process("etcd", "--listen-client-urls", f":{etcd_port}")
        if etcd is not None:
            pids["etcd"] = etcd
    return pids


def cpu_seconds(pid: int) -> float:
    """User + system CPU of the process (every thread) so far."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


# -- the cluster side ----------------------------------------------------------------------------
def _start_cluster(state: Path) -> Path:
    scripts = Path(os.environ.get("KAI_REAL_K8S") or ROOT.parent / "shared" / "real-k8s")
    if not (scripts / "up.sh").is_file():
        raise SystemExit("no real control plane here: give --kubeconfig FILE")
    subprocess.run(["bash", str(scripts / "up.sh"), str(state)], check=True, capture_output=True)
    return state / "kubeconfig"


def _stop_cluster(state: Path) -> None:
    scripts = Path(os.environ.get("KAI_REAL_K8S") or ROOT.parent / "shared" / "real-k8s")
    subprocess.run(
        ["bash", str(scripts / "down.sh"), str(state), "--wipe"], capture_output=True, check=False
    )


def _prepare(kube: Any) -> None:
    from kai.kube.client import ApiError
    from kai.kube.resources import NAMESPACES
    from kai.sim.system import bootstrap

    bootstrap(kube)
    try:
        kube.create(NAMESPACES, {"metadata": {"name": NAMESPACE}})
    except ApiError as exc:
        if exc.status != 409:
            raise


def _certificates(directory: Path) -> bytes:
    """A CA and a serving certificate for 127.0.0.1 in ``directory`` (``kai webhook
    --cert-dir`` reads them; so does the null webhook). Returns the CA's PEM."""
    import datetime as dt

    from kai.webhooks.certs import new_ca, new_serving

    ca = new_ca("bench-webhook-ca", dt.timedelta(days=1))
    serving = new_serving(ca, ["127.0.0.1", "localhost"], dt.timedelta(days=1))
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tls.crt").write_bytes(serving.cert)
    (directory / "tls.key").write_bytes(serving.key)
    (directory / "ca.crt").write_bytes(ca.cert)
    return ca.cert


def _register(kube: Any, url: str | None, ca: bytes) -> None:
    """kai's own webhook configurations pointing at ``url``; None removes them."""
    from kai.webhooks import registration

    if url is None:
        registration.remove(kube)
        return
    registration.apply(kube, registration.configurations({"url": url}, ca))


def _wait_tls(port: int, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"webhook process exited with {proc.returncode}")
        try:
            with (
                socket.create_connection(("127.0.0.1", port), timeout=1) as raw,
                ctx.wrap_socket(raw),
            ):
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"no TLS answer on 127.0.0.1:{port}")


# -- the null webhook ----------------------------------------------------------------------------
_NULL_HEAD = b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"'
_NULL_TAIL = b'","allowed":true}}'
_UID = re.compile(rb'"request":\{"uid":"([^"]+)"')


def _kai_patch(kai_url: str, path: bytes, body: bytes) -> bytes:
    """The ``patch`` field (base64, as sent) of kai's answer to ``body`` at ``path``: one
    HTTP/1.1 call to ``kai webhook``, for the null-patch webhook's pre-encoded answer."""
    import http.client

    import orjson

    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    url = urlsplit(kai_url)
    conn = http.client.HTTPSConnection(url.hostname or "127.0.0.1", url.port, context=ctx)
    try:
        conn.request("POST", path.decode(), body, {"Content-Type": "application/json"})
        answer = orjson.loads(conn.getresponse().read())
    finally:
        conn.close()
    patch = (answer.get("response") or {}).get("patch")
    if not patch:
        raise SystemExit(f"kai's webhook at {kai_url} answered {path!r} without a patch: {answer}")
    return str(patch).encode()


def null_webhook(port: int, cert_dir: str, kai_url: str | None = None) -> None:
    """Serve ``allowed: true`` to every AdmissionReview, HTTP/2 only, answered inline on the
    connection's thread (no pool, no parse: the uid is cut from the body). Runs until killed.

    With ``kai_url`` (phase ``null-patch``), a call to a ``/mutate/`` path is answered with
    kai's own JSON patch: the first such call is passed to ``kai webhook`` at ``kai_url`` and
    its ``patch`` field kept; every later answer carries those same bytes (pre-encoded, no
    decision), so the API server decodes and applies exactly what it applies with kai."""
    from h2.config import H2Configuration
    from h2.connection import H2Connection
    from h2.events import DataReceived, RequestReceived, StreamEnded

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(cert_dir, "tls.crt"), os.path.join(cert_dir, "tls.key"))
    ctx.set_alpn_protocols(["h2"])
    sock = socket.create_server(("127.0.0.1", port), backlog=128)
    patched: list[bytes] = []  # the answer's tail for a mutation, once known
    lock = threading.Lock()

    def tail(path: bytes, body: bytes) -> bytes:
        if kai_url is None or not path.startswith(b"/mutate/"):
            return _NULL_TAIL
        with lock:
            if not patched:
                patch = _kai_patch(kai_url, path, body)
                head = b'","allowed":true,"patchType":"JSONPatch","patch":"'
                patched.append(head + patch + b'"}}')
        return patched[0]

    def connection(raw: socket.socket) -> None:
        with contextlib.suppress(OSError, ssl.SSLError):
            conn = ctx.wrap_socket(raw, server_side=True)
            h2 = H2Connection(H2Configuration(client_side=False, header_encoding=None))
            h2.initiate_connection()
            h2.increment_flow_control_window(1 << 30)
            conn.sendall(h2.data_to_send())
            bodies: dict[int, bytearray] = {}
            paths: dict[int, bytes] = {}
            while data := conn.recv(65536):
                for event in h2.receive_data(data):
                    if isinstance(event, RequestReceived) and kai_url is not None:
                        paths[event.stream_id] = dict(event.headers or []).get(b":path", b"")
                    elif isinstance(event, DataReceived):
                        bodies.setdefault(event.stream_id, bytearray()).extend(event.data or b"")
                        if event.flow_controlled_length:
                            h2.acknowledge_received_data(
                                event.flow_controlled_length, event.stream_id
                            )
                    elif isinstance(event, StreamEnded):
                        request = bytes(bodies.pop(event.stream_id, b""))
                        found = _UID.search(request)
                        end = tail(paths.pop(event.stream_id, b""), request)
                        body = _NULL_HEAD + (found[1] if found else b"") + end
                        h2.send_headers(
                            event.stream_id,
                            [
                                (b":status", b"200"),
                                (b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()),
                            ],
                        )
                        h2.send_data(event.stream_id, body, end_stream=True)
                out = h2.data_to_send()
                if out:
                    conn.sendall(out)
        with contextlib.suppress(OSError):
            raw.close()

    while True:
        raw, _ = sock.accept()
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=connection, args=(raw,), daemon=True).start()


# -- the load generator --------------------------------------------------------------------------
class _Credentials:
    """The kubeconfig's server and client certificate as files the ssl module can load."""

    def __init__(self, kubeconfig: str, directory: Path) -> None:
        import yaml

        config = yaml.safe_load(Path(kubeconfig).read_text())
        current = config.get("current-context")
        context = next(c["context"] for c in config["contexts"] if c["name"] == current)
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
        self.server = cluster["server"]
        directory.mkdir(parents=True, exist_ok=True)

        def file(entry: dict[str, Any], key: str, name: str) -> str:
            if key + "-data" in entry:
                path = directory / name
                path.write_bytes(base64.b64decode(entry[key + "-data"]))
                return str(path)
            if key in entry:
                return str(entry[key])
            raise SystemExit(f"{kubeconfig}: the HTTP/2 load generator needs {key}[-data]")

        self.ca = file(cluster, "certificate-authority", "api-ca.crt")
        self.cert = file(user, "client-certificate", "client.crt")
        self.key = file(user, "client-key", "client.key")


def _pod_template(scheduler: str) -> tuple[bytes, bytes]:
    """The pod's JSON around its name: ``head + name + tail``, encoded once."""
    import orjson

    body = orjson.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "@NAME@",
                "namespace": NAMESPACE,
                "annotations": {"gpu-fraction": "0.5"},
            },
            "spec": {
                "schedulerName": scheduler,
                "containers": [{"name": "main", "image": "busybox"}],
            },
        }
    )
    head, tail = body.split(b"@NAME@")
    return head, tail


# HTTP/2 frames (RFC 9113): type codes, flags, and the 9-byte header
_DATA, _HEADERS, _RST_STREAM, _SETTINGS, _PING, _GOAWAY, _WINDOW_UPDATE = 0, 1, 3, 4, 6, 7, 8
_END_STREAM, _ACK, _END_HEADERS = 0x1, 0x1, 0x4
_FRAME = struct.Struct(">HBBBL")  # length (24 bits: 16 + 8), type, flags, stream id
_MAX_WINDOW = (1 << 31) - 1


def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    n = len(payload)
    return _FRAME.pack(n >> 8, n & 0xFF, kind, flags, stream) + payload


def _literal(name: bytes, value: bytes) -> bytes:
    """HPACK: a literal header field without indexing, new name (short strings only)."""
    assert len(name) < 127 and len(value) < 127
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def run_load(
    creds: _Credentials, rate: float, seconds: float, tag: str, scheduler: str = "kai-scheduler"
) -> dict[str, Any]:
    """Open loop on one HTTP/2 connection: request i is due at ``start + i / rate``.

    A deliberately small HTTP/2 client, so that the load costs the shared machine little: every
    request is the same pre-encoded HEADERS block (HPACK literals, never indexed: no encoder
    state) and a DATA frame of the same length (fixed-width pod names), only the stream id
    and the name change. Responses are not HPACK-decoded: a dry-run create answers a Pod
    (``{"kind":"Pod"...``), anything else is a Status, which is all the client needs to know.
    One thread sends what is due, reads what came back, and sleeps in ``select`` until the next
    request is due; requests over the server's stream limit or send window wait (their clock
    runs).
    """
    url = urlsplit(creds.server)
    host, port = url.hostname or "127.0.0.1", url.port or 443
    ctx = ssl.create_default_context(cafile=creds.ca)
    ctx.load_cert_chain(creds.cert, creds.key)
    ctx.set_alpn_protocols(["h2"])
    raw = socket.create_connection((host, port))
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn = ctx.wrap_socket(raw, server_hostname=host)
    if conn.selected_alpn_protocol() != "h2":
        raise SystemExit(f"{creds.server} does not speak HTTP/2")

    total = int(rate * seconds)
    head, tail = _pod_template(scheduler)
    width = len(str(total))
    body_length = len(head) + len(f"bench-{tag}-") + width + len(tail)
    block = b"".join(
        [
            b"\x83",  # :method POST (static table 3)
            b"\x87",  # :scheme https (static table 7)
            _literal(b":authority", f"{host}:{port}".encode()),
            _literal(b":path", f"/api/v1/namespaces/{NAMESPACE}/pods?dryRun=All".encode()),
            _literal(b"content-type", b"application/json"),
            _literal(b"accept", b"application/json"),
            _literal(b"content-length", str(body_length).encode()),
        ]
    )
    headers_head = _FRAME.pack(len(block) >> 8, len(block) & 0xFF, _HEADERS, _END_HEADERS, 0)[:5]
    data_head = _FRAME.pack(body_length >> 8, body_length & 0xFF, _DATA, _END_STREAM, 0)[:5]
    stream_id = struct.Struct(">L")
    # our receive windows: as large as allowed, the connection's replenished as data arrives
    conn.sendall(
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
        + _frame(_SETTINGS, 0, 0, struct.pack(">HL", 0x4, _MAX_WINDOW))  # INITIAL_WINDOW_SIZE
        + _frame(_WINDOW_UPDATE, 0, 0, stream_id.pack(_MAX_WINDOW - 65535))
    )
    max_streams = 100  # until the server's SETTINGS say otherwise
    send_window = 65535  # the connection's; each stream's is far above one small body
    received = 0  # DATA bytes not yet given back to the server's send window

    due_of: dict[int, float] = {}
    ok: set[int] = set()  # streams whose body began like a Pod
    latencies: list[float] = []
    errors: list[str] = []
    failed = 0
    buffer = bytearray()
    cpu0 = time.process_time()
    start = time.monotonic() + 0.2
    sent = 0
    next_stream = 1
    while len(latencies) + failed < total:
        now = time.monotonic()
        out = bytearray()
        while (
            sent < total
            and start + sent / rate <= now
            and len(due_of) < max_streams
            and send_window >= body_length
        ):
            sid = stream_id.pack(next_stream)
            out += headers_head + sid + block
            out += data_head + sid + head + f"bench-{tag}-{sent:0{width}d}".encode() + tail
            due_of[next_stream] = start + sent / rate
            send_window -= body_length
            next_stream += 2
            sent += 1
        if out:
            conn.sendall(out)
        wait = 1.0
        if sent < total and len(due_of) < max_streams and send_window >= body_length:
            wait = max(0.0, start + sent / rate - time.monotonic())
        if not conn.pending():
            readable, _, _ = select.select([conn], [], [], wait)
            if not readable:
                continue
        data = conn.recv(262144)
        if not data:
            raise SystemExit("the API server closed the connection")
        done = time.monotonic()
        buffer += data
        reply = bytearray()
        pos = 0
        while len(buffer) - pos >= 9:
            hi, lo, kind, flags, sid_ = _FRAME.unpack_from(buffer, pos)
            length = (hi << 8) | lo
            if len(buffer) - pos < 9 + length:
                break
            payload = bytes(buffer[pos + 9 : pos + 9 + length])
            pos += 9 + length
            sid_ &= _MAX_WINDOW
            if kind == _DATA:
                received += length
                if payload.startswith(b'{"kind":"Pod"'):
                    ok.add(sid_)
                elif payload and sid_ not in ok and len(errors) < 5:
                    errors.append(payload[:300].decode(errors="replace"))
            elif kind == _SETTINGS and not flags & _ACK:
                for i in range(0, len(payload) - 5, 6):
                    key, value = struct.unpack_from(">HL", payload, i)
                    if key == 0x3:  # MAX_CONCURRENT_STREAMS
                        max_streams = value
                reply += _frame(_SETTINGS, _ACK, 0, b"")
            elif kind == _WINDOW_UPDATE and sid_ == 0:
                send_window += stream_id.unpack(payload)[0] & _MAX_WINDOW
            elif kind == _PING and not flags & _ACK:
                reply += _frame(_PING, _ACK, 0, payload)
            elif kind == _RST_STREAM:
                if due_of.pop(sid_, None) is not None:
                    failed += 1
                    errors.append(f"stream {sid_} reset: error {stream_id.unpack(payload)[0]}")
                continue
            elif kind == _GOAWAY:
                raise SystemExit(f"the API server sent GOAWAY: {payload[8:200]!r}")
            if kind in (_DATA, _HEADERS) and flags & _END_STREAM:
                due = due_of.pop(sid_, None)
                if due is None:
                    continue
                if sid_ in ok:
                    ok.discard(sid_)
                    latencies.append((done - due) * 1000)
                else:
                    failed += 1
        del buffer[:pos]
        if received > 1 << 20:
            reply += _frame(_WINDOW_UPDATE, 0, 0, stream_id.pack(received))
            received = 0
        if reply:
            conn.sendall(reply)
    elapsed = time.monotonic() - start
    cpu = time.process_time() - cpu0
    with contextlib.suppress(OSError):
        conn.sendall(_frame(_GOAWAY, 0, 0, stream_id.pack(0) + stream_id.pack(0)))
    conn.close()
    return {
        "sent": total,
        "rate": total / elapsed,
        "errors": errors,
        "failed": failed,
        "p50": _percentile(latencies, 0.50),
        "p90": _percentile(latencies, 0.90),
        "p99": _percentile(latencies, 0.99),
        "max": max(latencies, default=float("nan")),
        "client_cpu": cpu,
        "elapsed": elapsed,
    }


# -- the webhooks alone -------------------------------------------------------------------------
def _review_body(uid: str) -> bytes:
    """An AdmissionReview of a pod CREATE as kube-apiserver sends it (defaults filled in, the
    service-account volume, managedFields), for a fractional-GPU pod of kai."""
    import orjson

    mount = "/var/run/secrets/kubernetes.io/serviceaccount"
    pod = {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": "bench-direct",
            "namespace": NAMESPACE,
            "uid": "5d7c4c43-7f3a-4b0e-9b59-1c5f1c0b4a11",
            "creationTimestamp": "2026-12-01T21:00:00Z",
            "annotations": {"gpu-fraction": "0.5"},
            "managedFields": [
                {
                    "manager": "python",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:annotations": {"f:gpu-fraction": {}}}},
                }
            ],
        },
        "spec": {
            "volumes": [
                {
                    "name": "kube-api-access-abcde",
                    "projected": {
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {"configMap": {"name": "kube-root-ca.crt"}},
                        ],
                        "defaultMode": 420,
                    },
                }
            ],
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {},
                    "volumeMounts": [
                        {"name": "kube-api-access-abcde", "readOnly": True, "mountPath": mount}
                    ],
                    "terminationMessagePath": "/dev/termination-log",
                    "imagePullPolicy": "Always",
                }
            ],
            "restartPolicy": "Always",
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "schedulerName": "kai-scheduler",
            "priority": 0,
        },
        "status": {"phase": "Pending", "qosClass": "BestEffort"},
    }
    kind = {"group": "", "version": "v1", "kind": "Pod"}
    resource = {"group": "", "version": "v1", "resource": "pods"}
    return orjson.dumps(
        {
            "kind": "AdmissionReview",
            "apiVersion": "admission.k8s.io/v1",
            "request": {
                "uid": uid,
                "kind": kind,
                "resource": resource,
                "requestKind": kind,
                "requestResource": resource,
                "name": "bench-direct",
                "namespace": NAMESPACE,
                "operation": "CREATE",
                "userInfo": {"username": "admin", "groups": ["system:masters"]},
                "object": pod,
                "oldObject": None,
                "dryRun": True,
                "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
            },
        }
    )


def drive_direct(port: int, pid: int, calls: int, concurrency: int = 32) -> dict[str, float]:
    """``calls`` pod AdmissionReviews (mutate and validate in turn) sent straight to a webhook
    over one HTTP/2 connection, ``concurrency`` in flight: the webhook process's CPU per call
    and its rate, without the API server."""
    from h2.config import H2Configuration
    from h2.connection import H2Connection
    from h2.events import DataReceived, ResponseReceived, StreamEnded

    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    conn = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)))
    h2 = H2Connection(H2Configuration(client_side=True, header_encoding=None))
    h2.initiate_connection()
    h2.increment_flow_control_window(1 << 30)
    conn.sendall(h2.data_to_send())
    bodies = [_review_body(f"{i:08d}-0000-4000-8000-000000000000") for i in range(calls)]
    paths = (b"/mutate/pods?timeout=3s", b"/validate/pods?timeout=3s")
    sent = done = failed = 0
    open_streams: set[int] = set()
    cpu0, wall0 = cpu_seconds(pid), time.monotonic()
    while done < calls:
        while (
            sent < calls
            and len(open_streams) < concurrency
            and h2.outbound_flow_control_window > len(bodies[sent])
        ):
            sid = h2.get_next_available_stream_id()
            h2.send_headers(
                sid,
                [
                    (b":method", b"POST"),
                    (b":scheme", b"https"),
                    (b":authority", f"127.0.0.1:{port}".encode()),
                    (b":path", paths[sent % 2]),
                    (b"content-type", b"application/json"),
                ],
            )
            h2.send_data(sid, bodies[sent], end_stream=True)
            open_streams.add(sid)
            sent += 1
        conn.sendall(h2.data_to_send())
        data = conn.recv(262144)
        if not data:
            raise SystemExit(f"the webhook on port {port} closed the connection")
        for event in h2.receive_data(data):
            if isinstance(event, ResponseReceived):
                failed += dict(event.headers or []).get(b":status") != b"200"
            elif isinstance(event, DataReceived) and event.flow_controlled_length:
                h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, StreamEnded):
                open_streams.discard(event.stream_id)
                done += 1
        conn.sendall(h2.data_to_send())
    wall = time.monotonic() - wall0
    cpu = cpu_seconds(pid) - cpu0
    conn.close()
    return {"us_per_call": 1e6 * cpu / calls, "rate": calls / wall, "failed": failed}


# -- the run -------------------------------------------------------------------------------------
def _spawn(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kubeconfig", help="a running cluster (default: start one)")
    parser.add_argument("--rate", type=float, default=500.0, help="pod creates per second")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each phase")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds before each phase")
    parser.add_argument("--repeat", type=int, default=1, help="rounds (each: none, null, kai)")
    parser.add_argument(
        "--phases",
        help="which phases, in order (default: none,null,kai and base with --base-tree; "
        "null-patch: the null webhook answering the mutation with kai's patch; "
        "kai-python: this tree's webhook with --server-backend python)",
    )
    parser.add_argument(
        "--direct",
        type=int,
        default=0,
        metavar="N",
        help="first send N AdmissionReviews straight to each webhook (no API server): CPU per "
        "call; --seconds 0 then skips the API server phases",
    )
    parser.add_argument(
        "--base-tree",
        metavar="DIR",
        help="another checkout of kai (e.g. main): its `kai webhook` runs as phase 'base', "
        "side by side with this tree's in the same run",
    )
    parser.add_argument(
        "--null-webhook", nargs="+", metavar="PORT CERT_DIR [KAI_URL]", help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.null_webhook:
        null_webhook(int(args.null_webhook[0]), args.null_webhook[1], *args.null_webhook[2:3])
        return 0
    known = (*PHASES, "null-patch", "kai-python", *(("base",) if args.base_tree else ()))
    default = (*PHASES, "base") if args.base_tree else PHASES
    phases = [p for p in (args.phases or ",".join(default)).split(",") if p]
    unknown = set(phases) - set(known)
    if unknown:
        parser.error(f"--phases: unknown {sorted(unknown)}; choose from {', '.join(known)}")
    if args.base_tree and not (Path(args.base_tree) / "controllers" / "kai").is_dir():
        parser.error(f"--base-tree {args.base_tree}: no controllers/kai in it")

    # a SIGTERM (e.g. from `timeout`) still stops the webhooks and removes the configurations
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.path.insert(0, str(ROOT / "controllers"))
    from kai.kube.client import Kube
    from kai.webhooks.app import free_port

    tmp = Path(tempfile.mkdtemp(prefix="bench-webhook-"))
    started = args.kubeconfig is None
    kubeconfig = Path(args.kubeconfig) if args.kubeconfig else _start_cluster(tmp / "k8s")
    kube = Kube.from_kubeconfig(str(kubeconfig))
    creds = _Credentials(str(kubeconfig), tmp / "client")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "controllers")}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    registered = False  # configurations of this run to remove (never another run's)
    try:
        _prepare(kube)
        ca = _certificates(tmp / "certs")
        # kai webhook as in a cluster, but registered by this script (like the null one), with
        # the certificate of --cert-dir: every webhook gets the same configurations
        trees = {"kai": ROOT}
        if "kai-python" in phases or (args.direct and not args.phases):
            trees["kai-python"] = ROOT
        if args.base_tree:
            trees["base"] = Path(args.base_tree).resolve()
        ports: dict[str, tuple[int, int]] = {}  # phase -> (HTTPS port, metrics port)
        for phase, tree in trees.items():
            ports[phase] = free_port(), free_port()
            backend = ("--server-backend", "python") if phase == "kai-python" else ()
            procs[phase] = _spawn(
                [
                    *(sys.executable, "-m", "kai.cli", "webhook"),
                    *("--kubeconfig", str(kubeconfig), "--host", "127.0.0.1"),
                    *("--port", str(ports[phase][0]), "--metrics-port", str(ports[phase][1])),
                    *("--cert-dir", str(tmp / "certs"), "--log-level", "WARNING"),
                    *backend,
                ],
                tmp / f"{phase}-webhook.log",
                {**env, "PYTHONPATH": str(tree / "controllers")},
            )
        ports["null"] = free_port(), 0
        procs["null"] = _spawn(
            [sys.executable, __file__, "--null-webhook", str(ports["null"][0]), str(tmp / "certs")],
            tmp / "null-webhook.log",
            env,
        )
        if "null-patch" in phases or args.direct:
            # the null webhook answering the mutation with kai's own patch (asked of kai once)
            ports["null-patch"] = free_port(), 0
            procs["null-patch"] = _spawn(
                [
                    *(sys.executable, __file__, "--null-webhook", str(ports["null-patch"][0])),
                    *(str(tmp / "certs"), f"https://127.0.0.1:{ports['kai'][0]}"),
                ],
                tmp / "null-patch-webhook.log",
                env,
            )
        for phase, (port, _metrics) in ports.items():
            _wait_tls(port, procs[phase])
        urls: dict[str, str | None] = {
            p: f"https://127.0.0.1:{port}" for p, (port, _) in ports.items()
        }
        urls["none"] = None
        pids = control_plane_pids(creds.server)
        if "kube-apiserver" not in pids:
            print(f"note: no kube-apiserver process found for {creds.server}: no CPU figures")
        import urllib.request

        def webhook_metrics(phase: str) -> str:
            if phase not in trees:
                return ""
            url = f"http://127.0.0.1:{ports[phase][1]}/metrics"
            with urllib.request.urlopen(url) as r:
                return str(r.read().decode())

        if args.direct:
            print(
                f"\nThe webhooks alone ({args.direct} pod calls each, mutate and validate in turn, "
            )
            print("32 in flight on one HTTP/2 connection, no API server):")
            print("| round | webhook | load avg | calls/s | µs CPU / call | failed |")
            print("|---:|---|---:|---:|---:|---:|")
            for round_ in range(args.repeat):
                for phase in [
                    p for p in ("null", "null-patch", "base", "kai-python", "kai") if p in ports
                ]:
                    drive_direct(ports[phase][0], procs[phase].pid, 300)  # warm up
                    load = os.getloadavg()[0]
                    d = drive_direct(ports[phase][0], procs[phase].pid, args.direct)
                    print(
                        f"| {round_ + 1} | {phase} | {load:.1f} | {d['rate']:.0f} | "
                        f"{d['us_per_call']:.0f} | {d['failed']:.0f} |",
                        flush=True,
                    )
            print()
        if args.seconds <= 0:
            return 0
        print(
            f"load: {args.rate:g} pod creates/s (dryRun=All, fractional GPU pods for kai: two "
            f"webhook calls each), {args.seconds:g} s per phase, phases {', '.join(phases)}; "
            f"one HTTP/2 connection to the API server"
        )
        rows: list[dict[str, Any]] = []
        metric = "apiserver_admission_webhook_admission_duration_seconds"
        for round_ in range(args.repeat):
            for phase in phases:
                _register(kube, urls[phase], ca)
                registered = True
                run_load(creds, args.rate, args.warmup, f"w{round_}{phase}")  # warm up
                load_before = os.getloadavg()[0]
                watched = {**pids, "webhook": procs[phase].pid} if phase != "none" else pids
                cpu_before = {name: cpu_seconds(pid) for name, pid in watched.items()}
                api_before = kube.get_text("/metrics")[1]
                ours_before = webhook_metrics(phase)
                result = run_load(creds, args.rate, args.seconds, f"r{round_}{phase}")
                cpu = {name: cpu_seconds(pid) - cpu_before[name] for name, pid in watched.items()}
                api_after = kube.get_text("/metrics")[1]
                ours_after = webhook_metrics(phase)
                cpu["load generator"] = result["client_cpu"]
                result.update(
                    round=round_ + 1,
                    phase=phase,
                    load=load_before,
                    cpu=cpu,
                    api={
                        kind: _delta(
                            _histogram(api_after, metric, f'type="{kind}"'),
                            _histogram(api_before, metric, f'type="{kind}"'),
                        )
                        for kind in ("admit", "validating")
                    },
                    ours={
                        hook: _delta(
                            _histogram(
                                ours_after, "kai_webhook_request_duration_milliseconds", hook
                            ),
                            _histogram(
                                ours_before, "kai_webhook_request_duration_milliseconds", hook
                            ),
                        )
                        for hook in ('"pods.mutate"', '"pods.validate"')
                    }
                    if phase in trees
                    else {},
                )
                rows.append(result)
                print(
                    f"  round {round_ + 1} {phase}: {result['rate']:.0f}/s, "
                    f"p99 {result['p99']:.1f} ms (load average {load_before:.1f})",
                    flush=True,
                )
        _register(kube, None, ca)
        _report(rows)
    finally:
        if registered:
            with contextlib.suppress(Exception):
                _register(kube, None, b"")
        for proc in procs.values():
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        kube.close()
        if started:
            _stop_cluster(tmp / "k8s")
    return 0


def _report(rows: list[dict[str, Any]]) -> None:
    print()
    print("Client round trip (from the moment each create was due):")
    print("| round | webhook | load avg | sent/s | failed | p50 ms | p90 ms | p99 ms | max ms |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['round']} | {r['phase']} | {r['load']:.1f} | {r['rate']:.0f} | {r['failed']} | "
            f"{r['p50']:.1f} | {r['p90']:.1f} | {r['p99']:.1f} | {r['max']:.1f} |"
        )
    print()
    print("CPU, cores (CPU seconds / phase seconds), and the webhook's CPU per call:")
    names = ["kube-apiserver", "etcd", "webhook", "load generator"]
    print("| round | webhook | " + " | ".join(names) + " | webhook calls | µs CPU / call |")
    print("|---:|---|" + "---:|" * (len(names) + 2))
    for r in rows:
        calls = sum(h.get(float("inf"), 0.0) for h in r["api"].values())
        cells = [f"{r['cpu'][n] / r['elapsed']:.2f}" if n in r["cpu"] else "-" for n in names]
        per_call = (
            f"{1e6 * r['cpu']['webhook'] / calls:.0f}" if calls and "webhook" in r["cpu"] else "-"
        )
        print(
            f"| {r['round']} | {r['phase']} | "
            + " | ".join(cells)
            + f" | {calls:.0f} | {per_call} |"
        )
    print()
    print("API server's view (apiserver_admission_webhook_admission_duration_seconds):")
    print("| round | webhook | type | calls | <= 5 ms | <= 25 ms | p99 bucket |")
    print("|---:|---|---|---:|---:|---:|---:|")
    for r in rows:
        for kind, hist in r["api"].items():
            if not hist.get(float("inf")):
                continue
            print(
                f"| {r['round']} | {r['phase']} | {kind} | {hist[float('inf')]:.0f} | "
                f"{_bucket_share(hist, 0.005)} | {_bucket_share(hist, 0.025)} | "
                f"{_bucket_quantile(hist, 0.99) * 1000:g} ms |"
            )
    print()
    print("kai webhook's view (kai_webhook_request_duration_milliseconds, arrival to answer):")
    print("| round | webhook | path | calls | <= 1 ms | <= 5 ms | p50 bucket | p99 bucket |")
    print("|---:|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        for hook, hist in r["ours"].items():
            print(
                f"| {r['round']} | {r['phase']} | {hook.strip(chr(34))} | "
                f"{hist.get(float('inf'), 0):.0f} | {_bucket_share(hist, 1)} | "
                f"{_bucket_share(hist, 5)} | {_bucket_quantile(hist, 0.5):g} ms | "
                f"{_bucket_quantile(hist, 0.99):g} ms |"
            )
    for r in rows:
        for e in r["errors"][:3]:
            print(f"error ({r['phase']}):", e)


if __name__ == "__main__":
    sys.exit(main())
