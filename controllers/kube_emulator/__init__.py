"""An embedded Kubernetes API server for tests, benchmarks and ``kai up``.

The unchanged official ``kubernetes`` Python client and kubectl talk to it over HTTP(S) as to a
real cluster: discovery, CRUD on built-in kinds and on the custom resources that CRDs define
(validated against their schemas), resourceVersions and optimistic concurrency, label and field
selectors, paged lists, watches with bookmarks and 410 Gone, finalizers, cascading deletion,
three PATCH flavours, pods/binding, and admission webhooks. See docs/design/apiserver.md.

This package never imports the ``kubernetes`` client.
"""

from kube_emulator.options import ServerOptions
from kube_emulator.server import ApiServer

__all__ = ["ApiServer", "ServerOptions"]
