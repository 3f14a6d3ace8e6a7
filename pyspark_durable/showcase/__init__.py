"""The try-it wing: what shows the WAL at work on this machine, apart from the layers
a job depends on. Nothing in codec/, log/, wal/, endpoint/ or spark/ imports it; the
CLI reaches it for ``durablewal demo`` and ``durablewal kafka``.

================  =================================================================
module            what it holds
================  =================================================================
``demo/``         ``durablewal demo``: an orders job crashed on purpose, then proved
                  exactly-once from the WAL's own record
``localkafka/``   ``durablewal kafka start|stop|status``: Apache Kafka on 127.0.0.1,
                  also the test suite's and the benchmarks' brokers
``session``       a local SparkSession with ``durablewal`` registered (demo,
                  notebook, examples)
``notebook``      ``python -m pyspark_durable.showcase.notebook``: runs the quickstart
                  notebook on this interpreter
================  =================================================================
"""
