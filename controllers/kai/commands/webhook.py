"""``kai webhook``: the admission server (validating and mutating webhooks), until SIGTERM."""

from __future__ import annotations

import argparse
import sys

HELP = "run the admission webhooks (validation of policies, queues, PodGroups, pods; pod mutation)"

EPILOG = """\
Certificates: by default self-managed (a CA and a serving certificate kept in the Secret
--cert-secret of --namespace, renewed before expiry, the caBundle of the kai-webhook
configurations patched); with --cert-dir DIR the certificate in DIR (tls.crt, tls.key, e.g. a
cert-manager Secret mounted there) is served and reloaded when it changes.

--self-register URL creates the ValidatingWebhookConfiguration and MutatingWebhookConfiguration
"kai-webhook" with a url clientConfig pointing at URL (for API servers that reach this process
at an address rather than through a Service) and removes them on a clean stop.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig to use (default: in-cluster config, then $KUBECONFIG)",
    )
    parser.add_argument("--port", type=int, default=9443, help="HTTPS port (default: 9443)")
    parser.add_argument(
        "--bind-address",
        "--host",
        dest="host",
        default=None,
        metavar="ADDRESS",
        help="address the HTTPS port listens on (default: $POD_IP when set, as the deployment "
        "sets it from the pod's status.podIP, else 0.0.0.0: every address); --host is the "
        "old name",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=0,
        metavar="PORT",
        help="plain-HTTP port for /metrics, /healthz (liveness) and /readyz (default: off)",
    )
    parser.add_argument(
        "--cert-dir",
        metavar="DIR",
        help="serve the provided certificate DIR/tls.crt + DIR/tls.key (default: self-managed)",
    )
    parser.add_argument(
        "--cert-secret",
        default="kai-webhook-certs",
        metavar="NAME",
        help="Secret of the self-managed certificates (default: kai-webhook-certs)",
    )
    parser.add_argument(
        "--cert-validity",
        default="8760h",
        metavar="DURATION",
        help="validity of a self-managed serving certificate; renewed with a third left "
        "(default: 8760h)",
    )
    parser.add_argument(
        "--ca-validity",
        default="87600h",
        metavar="DURATION",
        help="validity of the self-managed CA (default: 87600h)",
    )
    parser.add_argument(
        "--self-register",
        metavar="URL",
        help="create/replace the webhook configurations with this https URL and remove them "
        "on a clean stop (default: off: the configurations are installed with kai)",
    )
    parser.add_argument(
        "--namespace",
        default="kai-scheduler",
        help="namespace of kai (certificate Secret, Service name in the certificate, excluded "
        "from the pod webhooks) (default: kai-scheduler)",
    )
    parser.add_argument(
        "--service-name",
        default="kai-webhook",
        help="Service in front of the webhook, for the certificate (default: kai-webhook)",
    )
    parser.add_argument(
        "--scheduler-name",
        default="kai-scheduler",
        help="pods with this spec.schedulerName are validated and mutated (default: kai-scheduler)",
    )
    parser.add_argument(
        "--gpu-runtime-class",
        default="",
        metavar="NAME",
        help="set this runtimeClassName on GPU pods that have none, e.g. nvidia (default: off)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=64,
        help="threads for calls that read the cluster live (policy validation) (default: 64)",
    )
    _add_limits(parser)
    parser.add_argument(
        "--server-backend",
        choices=("python", "granian"),
        default="python",
        help="the HTTPS layer: python (ssl and h2) or granian (TLS and HTTP/2 in Rust; needs "
        "the kai-gitops-scheduler[granian] extra) (default: python)",
    )
    parser.add_argument(
        "--kai-queue-rules",
        choices=("enforce", "warn"),
        default="enforce",
        help="raw scheduling.run.ai/v2 Queues whose limit is below their quota, whose "
        "children's quotas sum above theirs, or whose quota is above the parent's limit: "
        "enforce refuses them as kai validate does; warn admits them with a warning (for "
        "clusters migrating from KAI whose Queues already break these rules) (default: enforce)",
    )
    from kai.commands._logs import add_logging_options

    add_logging_options(parser)
    parser.add_argument(
        "--print-configurations",
        action="store_true",
        help="print the two webhook configurations for the Service --service-name in "
        "--namespace (port 443) as YAML, and exit (for manifests and charts; the caBundle is "
        "filled in at run time, or by cert-manager)",
    )


#: the server's limits: flag, Limits field, kind (count, size, duration), help
_LIMIT_FLAGS = (
    ("--max-connections", "max_connections", "count", "connections open at once"),
    (
        "--max-connections-per-client",
        "max_connections_per_client",
        "count",
        "connections open at once from one client address",
    ),
    (
        "--handshake-timeout",
        "handshake_timeout",
        "duration",
        "time for a connection's TLS handshake (and HTTP/2 preface)",
    ),
    (
        "--request-timeout",
        "request_timeout",
        "duration",
        "time for a request's head and body from its first byte (not renewed by each byte)",
    ),
    ("--idle-timeout", "idle_timeout", "duration", "a connection without a request is closed"),
    ("--max-request-body", "max_body", "size", "body of one request (413 beyond)"),
    (
        "--max-queued",
        "max_queued",
        "count",
        "requests waiting for a worker; beyond, 429 at once and /readyz not ready",
    ),
    (
        "--http2-max-streams",
        "max_streams",
        "count",
        "HTTP/2 streams open at once on a connection (SETTINGS_MAX_CONCURRENT_STREAMS)",
    ),
    (
        "--http2-connection-buffer",
        "connection_buffer",
        "size",
        "request bodies one HTTP/2 connection may have unanswered (its flow-control window)",
    ),
    (
        "--body-buffer",
        "process_buffer",
        "size",
        "request bodies the process holds unanswered, all connections together",
    ),
    (
        "--http2-max-resets",
        "max_resets",
        "count",
        "streams a client may reset within 10s before its connection is closed",
    ),
)


def _add_limits(parser: argparse.ArgumentParser) -> None:
    from kai.webhooks.server import Limits

    defaults = Limits()
    group = parser.add_argument_group("limits of the HTTPS server (see docs/security.md)")
    for flag, field, kind, text in _LIMIT_FLAGS:
        value = getattr(defaults, field)
        shown = (
            f"{value // 1024**2}Mi"
            if kind == "size"
            else f"{value:g}s"
            if kind == "duration"
            else str(value)
        )
        metavar = {"count": "N", "size": "BYTES", "duration": "DURATION"}[kind]
        group.add_argument(flag, metavar=metavar, help=f"{text} (default: {shown})")


def _limits(args: argparse.Namespace) -> object:
    from dataclasses import replace

    from kai.api.duration import parse_duration
    from kai.api.untrusted_files import parse_size
    from kai.webhooks.server import Limits

    values: dict[str, object] = {}
    for flag, field, kind, _text in _LIMIT_FLAGS:
        text = getattr(args, _dest(flag))
        if text is None:
            continue
        try:
            if kind == "count":
                if not text.strip().isdigit():
                    raise ValueError("not a whole number")
                values[field] = int(text)
            elif kind == "size":
                values[field] = parse_size(text)
            else:
                values[field] = float(parse_duration(text))
        except ValueError as exc:
            raise SystemExit(f"kai webhook: {flag} {text!r}: {exc}") from exc
    limits = replace(Limits(), **values)  # type: ignore[arg-type]
    try:
        limits.check()
    except ValueError as exc:
        raise SystemExit(f"kai webhook: {exc}") from exc
    return limits


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def _options(args: argparse.Namespace) -> object:
    import datetime as dt
    import os
    from urllib.parse import urlsplit

    from kai.api.duration import parse_duration
    from kai.webhooks.app import Options

    durations = {}
    for flag in ("cert_validity", "ca_validity"):
        text = getattr(args, flag)
        try:
            seconds = parse_duration(text)
        except ValueError as exc:
            raise SystemExit(f"kai webhook: --{flag.replace('_', '-')} {text!r}: {exc}") from exc
        if seconds <= 0:
            raise SystemExit(f"kai webhook: --{flag.replace('_', '-')} must be positive")
        durations[flag] = dt.timedelta(seconds=seconds)
    if args.self_register:
        parts = urlsplit(args.self_register)
        if parts.scheme != "https" or not parts.hostname:
            raise SystemExit(
                f"kai webhook: --self-register {args.self_register!r}: the API server calls "
                "webhooks over https only; give https://HOST:PORT"
            )
    if (
        args.cert_dir
        and args.self_register
        and not os.path.exists(os.path.join(args.cert_dir, "ca.crt"))
    ):
        raise SystemExit(
            f"kai webhook: --self-register with --cert-dir needs {args.cert_dir}/ca.crt "
            "(the CA that the API server must trust)"
        )
    if args.server_backend == "granian":
        import importlib.util

        if importlib.util.find_spec("granian") is None:
            raise SystemExit(
                "kai webhook: --server-backend granian needs the granian package, which is not "
                "installed: pip install 'kai-gitops-scheduler[granian]' "
                "(or use --server-backend python)"
            )
    limits = _limits(args)
    host = args.host or os.environ.get("POD_IP") or "0.0.0.0"
    return Options(
        port=args.port,
        host=host,
        limits=limits,  # type: ignore[arg-type]
        metrics_port=args.metrics_port,
        namespace=args.namespace,
        service_name=args.service_name,
        self_register=args.self_register,
        cert_dir=args.cert_dir,
        cert_secret=args.cert_secret,
        cert_validity=durations["cert_validity"],
        ca_validity=durations["ca_validity"],
        scheduler_name=args.scheduler_name,
        gpu_runtime_class=args.gpu_runtime_class,
        workers=args.workers,
        server_backend=args.server_backend,
        kai_queue_rules=args.kai_queue_rules,
    )


def _print_configurations(args: argparse.Namespace) -> int:
    import yaml

    from kai.webhooks.registration import configurations

    service = {"namespace": args.namespace, "name": args.service_name, "port": 443}
    objects = configurations(
        {"service": service},
        b"",
        namespace=args.namespace,
        scheduler_name=args.scheduler_name,
        gpu_runtime_class=args.gpu_runtime_class,
    )
    sys.stdout.write(yaml.safe_dump_all(objects, sort_keys=False, explicit_start=True))
    return 0


def run(args: argparse.Namespace) -> int:
    if args.print_configurations:
        return _print_configurations(args)
    from kai.commands._logs import complain, setup_logging
    from kai.commands._signals import wait_for_signal

    setup_logging(args.log_level, args.log_format)
    try:
        opts = _options(args)
    except SystemExit as exc:
        complain("kai webhook", str(exc).removeprefix("kai webhook: "), args.log_format)
        return 2
    if args.host is None and getattr(opts, "host", "") == "0.0.0.0":
        import logging

        logging.getLogger("kai.webhook").warning(
            "listening on every address (0.0.0.0): no --bind-address and no $POD_IP; any "
            "client that can route to this machine can connect (docs/security.md)"
        )
    from kai.kube.client import ConfigError, Kube, KubeError
    from kai.webhooks.app import WebhookApp

    try:
        kube = Kube.from_kubeconfig(args.kubeconfig)
    except ConfigError as exc:
        complain("kai webhook", str(exc), args.log_format)
        return 2
    app = WebhookApp(kube, opts)  # type: ignore[arg-type]
    try:
        app.start()
    except (KubeError, OSError, TimeoutError, ValueError) as exc:
        complain("kai webhook", f"cannot start: {exc}", args.log_format)
        app.stop()
        kube.close()
        return 2
    try:
        code = wait_for_signal()
    finally:
        app.stop()
        kube.close()
    return code
