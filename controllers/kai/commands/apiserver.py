"""``kai apiserver``: run only the embedded Kubernetes API server until SIGTERM or Ctrl-C."""

from __future__ import annotations

import argparse
import logging
import threading
from pathlib import Path

from kai.commands._logs import add_logging_options, announce, complain, setup_logging

HELP = "run only the embedded Kubernetes API server"
DESCRIPTION = (
    "Run the embedded Kubernetes API server until SIGTERM or Ctrl-C. It serves HTTPS, and every "
    "request needs the bearer token of the kubeconfig it writes (--kubeconfig-out), a new random "
    "one at each start. Objects live in memory: without --data-dir, a restart loses every object."
)


def _rate(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text}")
    return value


def _service(text: str) -> tuple[str, str]:
    key, sep, address = text.partition("=")
    if not sep or "/" not in key or ":" not in address:
        raise argparse.ArgumentTypeError(f"expected NAMESPACE/NAME[:PORT]=HOST:PORT, got {text!r}")
    return key, address


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default: loopback only; any other address is warned about: "
        "whoever has the token, or anyone with --insecure-no-auth, can change every object)",
    )
    parser.add_argument("--port", type=int, default=0, help="port (default: any free port)")
    parser.add_argument(
        "--kubeconfig-out",
        type=Path,
        metavar="FILE",
        help="write a kubeconfig for this server to FILE (default: write none)",
    )
    scheme = parser.add_mutually_exclusive_group()
    scheme.add_argument(
        "--tls",
        action="store_true",
        help="serve HTTPS with a new self-signed certificate, its CA in the kubeconfig (the "
        "default; this flag makes a missing 'cryptography' package an error instead of a "
        "fallback to plain HTTP)",
    )
    scheme.add_argument(
        "--no-tls",
        action="store_true",
        help="serve plain HTTP: kubectl then sends no token (it sends credentials over HTTPS "
        "only), so use it with --insecure-no-auth or with clients that send the token anyway",
    )
    parser.add_argument(
        "--field-validation",
        choices=("Strict", "Warn", "Ignore"),
        default="Strict",
        help="default for requests without ?fieldValidation",
    )
    parser.add_argument(
        "--pod-deletion",
        choices=("kubelet", "immediate"),
        default="kubelet",
        help="bound pods deleted with a grace period wait for their kubelet "
        "(default) or go at once",
    )
    parser.add_argument(
        "--no-node-taint",
        action="store_true",
        help="do not taint new nodes node.kubernetes.io/not-ready:NoSchedule",
    )
    parser.add_argument(
        "--history",
        type=_positive_int,
        default=50_000,
        help="watch events kept for resuming watches (older: 410 Gone)",
    )
    parser.add_argument(
        "--bookmark-interval",
        type=_positive_float,
        default=5.0,
        metavar="SECONDS",
        help="time between BOOKMARK events on watches that asked for them",
    )
    parser.add_argument(
        "--webhook-service",
        type=_service,
        action="append",
        default=[],
        metavar="NS/NAME[:PORT]=HOST:PORT",
        help="where a webhook's service reference is reachable; repeatable (default: none)",
    )
    parser.add_argument(
        "--workload-controllers",
        action="store_true",
        help="run Job, ReplicaSet, Deployment and StatefulSet controllers that create their pods",
    )
    parser.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="accept requests without the bearer token (warned about; anyone who can connect "
        "can read and change every object)",
    )
    parser.add_argument(
        "--enable-test-endpoints",
        action="store_true",
        help="serve /kai-sim/faults (fault injection) and /kai-sim/compact (history "
        "compaction) to clients with the token (default: 404)",
    )
    parser.add_argument(
        "--max-connections",
        type=_positive_int,
        default=1024,
        metavar="N",
        help="open client connections at most; a new one closes the longest-idle one, or gets "
        "503 when none is idle (lowered to fit the file-descriptor limit)",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        metavar="DIR",
        help="keep objects and the resourceVersion counter in DIR across restarts (default: "
        "in memory only, a restart loses every object)",
    )
    parser.add_argument(
        "--fault-error-rate",
        type=_rate,
        default=0.0,
        help="answer this share of API requests with 500",
    )
    parser.add_argument(
        "--fault-conflict-rate",
        type=_rate,
        default=0.0,
        help="answer this share of updates and patches with 409",
    )
    parser.add_argument(
        "--fault-watch-drop-rate",
        type=_rate,
        default=0.0,
        help="chance per watch event that the connection is cut",
    )
    parser.add_argument(
        "--fault-watch-drop-after",
        type=_non_negative_int,
        default=0,
        metavar="N",
        help="cut every watch after N events",
    )
    parser.add_argument(
        "--fault-seed", type=int, default=0, help="seed of the fault injection's random choices"
    )
    add_logging_options(parser, level="WARNING")


def is_loopback(host: str) -> bool:
    """True for an address only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    import ipaddress

    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def warn_exposure(logger: str, host: str, no_auth: bool) -> None:
    """Log a warning for a non-loopback address and for running without authentication."""
    log = logging.getLogger(logger)
    if no_auth:
        log.warning(
            "--insecure-no-auth: requests need no token; anyone who can connect to the API "
            "server can read and change every object"
        )
    if not is_loopback(host):
        log.warning(
            "--host %s is not a loopback address: the API server is reachable from the network; %s",
            host,
            "it has no authentication (--insecure-no-auth)"
            if no_auth
            else "whoever obtains its token (in the kubeconfig) can read and change every object",
        )


def _tls_unavailable() -> bool:
    """``--tls`` needs the ``cryptography`` package, which comes with the ``local`` extra."""
    import importlib.util

    return importlib.util.find_spec("cryptography") is None


def use_tls(command: str, explicit: bool, no_tls: bool, log_format: str) -> bool | None:
    """Whether to serve HTTPS (the default); None when ``--tls`` was asked for and cannot be
    had (reported). Without the ``cryptography`` package the default falls back to plain HTTP
    with a warning."""
    if no_tls:
        return False
    if not _tls_unavailable():
        return True
    if explicit:
        complain(
            command,
            "--tls needs the 'cryptography' package: pip install 'kai-gitops-scheduler[local]'",
            log_format,
        )
        return None
    logging.getLogger(f"kai.{command.split()[-1]}").warning(
        "serving plain HTTP: HTTPS needs the 'cryptography' package "
        "(pip install 'kai-gitops-scheduler[local]'); "
        "kubectl sends no token over plain HTTP"
    )
    return False


def run(args: argparse.Namespace) -> int:
    setup_logging(args.log_level, args.log_format)
    tls = use_tls("kai apiserver", args.tls, args.no_tls, args.log_format)
    if tls is None:
        return 2
    from kai.commands._signals import stop_on_signals
    from kube_emulator import ApiServer, ServerOptions

    options = ServerOptions(
        host=args.host,
        port=args.port,
        tls=tls,
        default_field_validation=args.field_validation,
        pod_deletion=args.pod_deletion,
        taint_new_nodes=not args.no_node_taint,
        history_size=args.history,
        bookmark_interval=args.bookmark_interval,
        webhook_services=dict(args.webhook_service),
        workload_controllers=args.workload_controllers,
        require_auth=not args.insecure_no_auth,
        enable_test_endpoints=args.enable_test_endpoints,
        max_connections=args.max_connections,
        data_dir=str(args.data_dir) if args.data_dir else None,
    )
    warn_exposure("kai.apiserver", args.host, args.insecure_no_auth)
    try:
        server = ApiServer(options)
        server.start()
    except OSError as exc:
        where = exc.filename or f"{args.host}:{args.port}"
        message = f"cannot {'use' if exc.filename else 'listen on'} {where}: {exc.strerror}"
        complain("kai apiserver", message, args.log_format)
        return 2
    except ValueError as exc:  # a data directory that cannot be read back
        complain("kai apiserver", str(exc), args.log_format)
        return 2
    server.faults.configure(
        error_rate=args.fault_error_rate,
        conflict_rate=args.fault_conflict_rate,
        watch_drop_rate=args.fault_watch_drop_rate,
        watch_drop_after=args.fault_watch_drop_after,
        seed=args.fault_seed,
    )
    stop = threading.Event()
    status = stop_on_signals(stop)
    if args.kubeconfig_out:
        try:
            server.write_kubeconfig(args.kubeconfig_out)
        except OSError as exc:
            server.stop()
            message = f"cannot write {args.kubeconfig_out}: {exc.strerror}"
            complain("kai apiserver", message, args.log_format)
            return 2
        announce(
            f"kubeconfig: {args.kubeconfig_out}",
            args.log_format,
            logger="kai.apiserver",
            kubeconfig=str(args.kubeconfig_out),
        )
    announce(f"serving: {server.url}", args.log_format, logger="kai.apiserver", url=server.url)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.stop()
    return status()
