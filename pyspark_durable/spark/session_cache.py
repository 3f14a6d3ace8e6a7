"""One open namespace per Python worker process and option set.

Spark reuses Python workers between tasks; opening the namespace (recovering its
state) once per process keeps per-task overhead low. A fork (Spark's worker
daemon forks) must not inherit open logs, so the cache is keyed by process id.
"""

from __future__ import annotations

import logging
import os
import threading

from pyspark_durable.endpoint.config import EndpointConfig, open_namespace
from pyspark_durable.errors import IncarnationMismatch, LogNotFound
from pyspark_durable.spark.options import WalOptions
from pyspark_durable.wal import Namespace

log = logging.getLogger(__name__)
_CACHE: dict[tuple, Namespace] = {}
_LOCK = threading.Lock()


def namespace_for(opts: WalOptions, create: bool = True, within_s: float = 0.0) -> Namespace:
    """The process's open namespace for these options, caught up with the WAL (``within_s``:
    a handle that caught up that recently is not caught up again).

    Readers pass ``create=False``: a read never creates a namespace, a folder or a
    topic, and takes the namespace's stored id unless the options name one.

    A cached handle whose WAL was lost or recreated meanwhile follows the new WAL
    (with a warning): the checks that matter are explicit (source offsets carry the
    incarnation, a streaming writer's steps must be consecutive), so a batch read in
    the same session sees the new WAL instead of failing on stale state.
    """
    key = (os.getpid(), create, *opts.key())
    with _LOCK:
        ns = _CACHE.get(key)
        if ns is None and not create:  # a writer's handle in this process serves reads too
            ns = _CACHE.get((os.getpid(), True, *opts.key()))
        if ns is None:
            ns = open_namespace(EndpointConfig(backend=opts.backend, namespace=opts.namespace,
                                               namespace_id=opts.namespace_id,
                                               options=dict(opts.store)), create=create)
            ns.entry_max_bytes = opts.entry_max_bytes
            _CACHE[key] = ns
            return ns
    try:
        ns.refresh(within_s)
    except IncarnationMismatch as exc:
        log.warning("%s", exc)
    except LogNotFound as exc:
        # the WAL's logs were deleted under this process's cached handle (a folder or
        # topics removed): forget the handle and open the WAL as it is now; the explicit
        # checks (offsets' incarnation, consecutive writer steps) still catch data loss
        log.warning("namespace=%s: the WAL is gone under this process's handle (%s); "
                    "opening it afresh", opts.namespace, exc)
        with _LOCK:
            for cached in [k for k, v in _CACHE.items() if v is ns]:
                del _CACHE[cached]
        ns.close()
        return namespace_for(opts, create, within_s)
    return ns
