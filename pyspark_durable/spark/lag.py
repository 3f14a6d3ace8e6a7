"""A reader's lag in a running Spark application, logged on every progress event.

PySpark 4.3's Python streaming source API has no hook for custom metrics or a
description in query progress (the driver-side runner,
``pyspark/sql/streaming/python_streaming_source_runner.py``, serves offsets,
partitions, commit, read limits and ``reportLatestOffset`` only), so
``lastProgress["sources"][0]`` carries only Spark's own fields and the offsets
(``latestOffset`` there is the WAL's next step). This listener adds the rest.

>>> spark.streams.addListener(LagListener({"namespace": "shop", "path": "/tmp/wal"},
...                                      reader_id="dashboard"))
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from pyspark.sql.streaming import StreamingQueryListener

from pyspark_durable.endpoint.lag import ReaderLag, reader_lags
from pyspark_durable.errors import DurableWalError
from pyspark_durable.spark.options import WalOptions
from pyspark_durable.spark.session_cache import namespace_for

log = logging.getLogger(__name__)


class LagListener(StreamingQueryListener):
    """On each progress and idle event, logs (and hands to ``on_lag``) registered readers'
    lag: a reader records where it is when Spark asks for the next batch, which an idle
    query does on every trigger, so its idle events are where a caught-up reader shows 0.

    ``options`` are the read's own options (``namespace``, ``path`` or ``backend`` and
    ``kafka.*``); ``reader_id`` limits it to one reader (None: every registered reader).
    A WAL that cannot be read is logged as a warning: a listener must not stop the
    application it watches.
    """

    def __init__(self, options: Mapping[str, str], reader_id: str | None = None,
                 on_lag: Callable[[ReaderLag], None] | None = None) -> None:
        self.opts = WalOptions.parse(dict(options))
        self.reader_id = reader_id
        self.on_lag = on_lag

    def onQueryStarted(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        self._report(event.progress.name or event.progress.id)

    def onQueryIdle(self, event) -> None:
        self._report(event.id)

    def _report(self, query: object) -> None:
        try:
            lags = reader_lags(namespace_for(self.opts, create=False))
        except DurableWalError as exc:
            log.warning("namespace=%s: reader lag unknown: %s", self.opts.namespace, exc)
            return
        for lag in lags:
            if self.reader_id is None or lag.reader == self.reader_id:
                log.info("namespace=%s query=%s: %s", self.opts.namespace, query, lag.text())
                if self.on_lag is not None:
                    self.on_lag(lag)

    def onQueryTerminated(self, event) -> None:
        pass
