"""One open namespace per Python worker process and option set.

Spark reuses Python workers between tasks; opening the namespace (recovering its
state) once per process keeps per-task overhead low. A fork (Spark's worker
daemon forks) must not inherit open logs, so the cache is keyed by process id.
"""

from __future__ import annotations

import os
import threading

from pyspark_durable.endpoint.config import EndpointConfig, open_namespace
from pyspark_durable.spark.options import WalOptions
from pyspark_durable.wal import Namespace

_CACHE: dict[tuple, Namespace] = {}
_LOCK = threading.Lock()


def namespace_for(opts: WalOptions) -> Namespace:
    key = (os.getpid(), *opts.key())
    with _LOCK:
        ns = _CACHE.get(key)
        if ns is None:
            ns = open_namespace(EndpointConfig(backend=opts.backend, namespace=opts.namespace,
                                               namespace_id=opts.namespace_id,
                                               options=dict(opts.store)))
            ns.entry_max_bytes = opts.entry_max_bytes
            _CACHE[key] = ns
        return ns
