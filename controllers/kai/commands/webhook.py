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
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on (default: 0.0.0.0)")
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
        help="threads for calls that read the cluster live; with --server-backend python also "
        "connections served at once (default: 64)",
    )
    parser.add_argument(
        "--server-backend",
        choices=("python", "granian"),
        default="python",
        help="the HTTPS layer: python (ssl and h2) or granian (TLS and HTTP/2 in Rust; needs "
        "the kai-gitops-scheduler[granian] extra) (default: python)",
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


def _options(args: argparse.Namespace) -> object:
    import datetime as dt
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
    if args.cert_dir and args.self_register:
        import os

        if not os.path.exists(os.path.join(args.cert_dir, "ca.crt")):
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
    return Options(
        port=args.port,
        host=args.host,
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
