"""Every option of the ``durablewal`` data source, once: the table that parsing, the
defaults, the did-you-mean hint and docs/options.md's table all come from.

Each option names its parser (:mod:`pyspark_durable.spark.option_values`), its minimum
and the :class:`~pyspark_durable.spark.options.WalOptions` field it sets, so
``WalOptions.parse`` is one loop over the table plus the rules that span options.
``python -m pyspark_durable.spark.option_table`` prints the docs table;
``tests/spark/test_option_table.py`` fails when docs/options.md's differs, or when a parsed
default differs from the one written here. Default values that belong to a concept
of another layer are that layer's constants (the cleaner's grace, the entry size
limit, the default table), never a second literal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark_durable.spark.option_values import (
    Parser,
    boolean,
    choice,
    duration,
    integer,
    integers,
    metadata_names,
    retention_limit,
    step_or,
    tables,
    text,
    timestamp,
)
from pyspark_durable.wal.metadata import METADATA_NAMES
from pyspark_durable.wal.namespace import DEFAULT_TABLE, ENTRY_MAX_BYTES
from pyspark_durable.wal.upkeep.cleaner import DEFAULT_GRACE_MS


@dataclass(frozen=True)
class Opt:
    """One option: its name, the default as README shows it, what it means; ``field``
    is its :class:`~pyspark_durable.spark.options.WalOptions` attribute, ``default``
    the parsed default, ``parse`` what turns its text into the field's value and
    ``minimum`` the least number it takes (None: no minimum, or not a number). An option
    without a field is read by a rule spanning options (``path``, ``paths``) or is
    Spark's own; ``passthrough`` options (``file.*``, ``kafka.*``) go to the backend as
    they are and are documented here only."""

    name: str
    shown: str
    doc: str
    field: str | None = None
    default: Any = None
    parse: Parser = text
    minimum: int | None = None
    passthrough: bool = False

    def value(self, given: str) -> Any:
        """The typed value of this option given as ``given``."""
        return self.parse(self.name, given, self.minimum)


OPTION_TABLE: tuple[Opt, ...] = (
    Opt("path", "(none)", "the WAL's root: a local folder (the file log) or `s3://bucket/prefix` "
        "(the S3 log); `.load(path)`, `.start(path)`, `.save(path)`. A URL of any other scheme "
        "(`s3a://`, `gs://`, `hdfs://`) is refused"),
    Opt(
        "file.segment_size_bytes",
        "1/64 of the disk, at most 64 MiB",
        "file backend: a region log starts a new segment file at this size (at least "
        "1024). The cleaner frees whole segments, so the default follows the file system "
        "the WAL is on (measured when a store opens) and retention frees space on a small "
        "disk too ([backends.md](backends.md#a-full-disk))",
        passthrough=True,
    ),
    Opt(
        "file.access",
        "`private`",
        "file backend: who may read the folders and files the WAL makes: `private` (folders "
        "0700, files 0600: the owner only) or `group` (0750 and 0640: the group may read). "
        "Set on creation whatever the umask; existing ones keep their mode, and "
        "`durablewal check` warns about wider ones ([operations.md]"
        "(operations.md#a-wal-in-a-folder-the-file-log))",
        passthrough=True,
    ),
    Opt(
        "backend",
        "`file`",
        "`file` \\| `kafka` \\| `s3` (an `s3://` path sets it; `memory` is refused in Spark: it "
        "cannot span Spark's Python workers)",
        field="backend",
        parse=choice("file", "kafka", "memory", "s3"),
        default="file",
    ),
    Opt("namespace", "`default`", "the WAL's namespace", field="namespace", parse=text, default="default"),
    Opt(
        "namespaceId",
        "`0`",
        "u8 id, fixed when the namespace is created (reads take the stored id unless given)",
        field="namespace_id",
        parse=integer,
        minimum=0,
    ),
    Opt("s3.endpoint_url", "the AWS chain", "S3 backend: an S3-compatible server "
        "(`http://host:port`); else `AWS_ENDPOINT_URL`, else AWS", passthrough=True),
    Opt("s3.region", "the AWS chain", "S3 backend: the bucket's region; else `AWS_REGION`, "
        "the profile's, or `us-east-1`", passthrough=True),
    Opt("s3.access_key_id", "the AWS chain", "S3 backend: with `s3.secret_access_key` (and "
        "`s3.session_token`), keys that override the AWS credential chain (variables, "
        "profile, web identity, container and instance roles); never printed", passthrough=True),
    Opt("s3.secret_access_key", "the AWS chain", "S3 backend: see `s3.access_key_id`",
        passthrough=True),
    Opt("s3.session_token", "the AWS chain", "S3 backend: see `s3.access_key_id`",
        passthrough=True),
    Opt("s3.profile", "the AWS chain", "S3 backend: a profile of `~/.aws/config`",
        passthrough=True),
    Opt("s3.max_attempts", "`5`", "S3 backend: attempts per request, the client's retries "
        "with backoff (throttling, dropped connections) included", passthrough=True),
    Opt("s3.retry_mode", "`standard`", "S3 backend: botocore's retry mode, `standard` or "
        "`adaptive`", passthrough=True),
    Opt("kafka.bootstrap.servers", "(none)", "Kafka backend: the brokers (then no path)", passthrough=True),
    Opt(
        "kafka.client",
        "`confluent`",
        "Kafka backend: `confluent` (librdkafka; the default when installed) or `kafka-python` "
        "(pure Python); `pip install 'pyspark_durable[kafka]'` installs both",
        passthrough=True,
    ),
    Opt(
        "kafka.replication.factor",
        "broker's",
        "Kafka backend: replication factor of the topics the WAL creates (`-1`: the broker's "
        "`default.replication.factor`)",
        passthrough=True,
    ),
    Opt(
        "kafka.min.insync.replicas",
        "broker's",
        "Kafka backend: `min.insync.replicas` of the topics the WAL creates (appends wait for "
        "this many replicas: `acks=all`)",
        passthrough=True,
    ),
    Opt(
        "kafka.security.protocol",
        "`PLAINTEXT`",
        "Kafka backend: `SASL_PLAINTEXT`, `SASL_SSL` or `SSL`; with `kafka.sasl.mechanism` "
        "(`PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`) and either "
        "`kafka.sasl.plain.username`/`kafka.sasl.plain.password` or `kafka.sasl.jaas.config` "
        "(PLAIN or SCRAM login module, as in Spark's Kafka connector), and `kafka.ssl.cafile` "
        "(the CA of the brokers' certificates); or `OAUTHBEARER` with OAuth2 client credentials: "
        "`kafka.sasl.oauthbearer.token.endpoint.url`, `kafka.sasl.oauthbearer.client.id`, "
        "`kafka.sasl.oauthbearer.client.secret`, `kafka.sasl.oauthbearer.scope`. Both clients. "
        "Secret values are never printed",
        passthrough=True,
    ),
    Opt(
        "region", "`0`", "write: the region of every row", field="region", parse=integer, minimum=0, default=0
    ),
    Opt(
        "regionColumn",
        "(none)",
        "write: an integer column routing each row to a region (not stored)",
        field="region_column",
        parse=text,
    ),
    Opt(
        "eventTimeColumn",
        "(none)",
        "write: a timestamp or date column whose min and max over each step are recorded in "
        "its commit: readers see them as `_event_time_min`/`_event_time_max`, "
        "`startingEventTime` selects by them and `durablewal steps` shows them (null values "
        "are ignored; a column of another type is refused before anything is written)",
        field="event_time_column",
        parse=text,
    ),
    Opt(
        "table",
        "`default`",
        "write: the table name of every row (always a name: `007` and `7` are two tables)",
        field="table",
        parse=text,
        default=DEFAULT_TABLE,
    ),
    Opt(
        "tableColumn",
        "(none)",
        "write: a column routing each row to a table (not stored): string values are names, "
        "integer values table ids",
        field="table_column",
        parse=text,
    ),
    Opt(
        "payloadFormat",
        "`arrow`",
        "write: `arrow` \\| `avro`",
        field="payload_format",
        parse=choice("arrow", "avro"),
        default="arrow",
    ),
    Opt(
        "mergeSchema",
        "`false`",
        "write: rows with new columns or wider types (int to long, float to double) add a schema "
        "version of the table instead of failing",
        field="merge_schema",
        parse=boolean,
        default=False,
    ),
    Opt(
        "entryMaxBytes",
        "`921600`",
        "write: entries are split to stay under this size",
        field="entry_max_bytes",
        parse=integer,
        minimum=1024,
        default=ENTRY_MAX_BYTES,
    ),
    Opt(
        "regions",
        "(all)",
        "read: comma list of regions (an unknown one fails, listing those with data)",
        field="regions",
        parse=integers,
        minimum=0,
    ),
    Opt(
        "tables",
        "(all)",
        "read: comma list of table names (`a, b`, spaces stripped), or a JSON list of names kept "
        'exactly and integer table ids (`["a,b", " c ", 7]`; a value starting with `[` is this '
        "form); an unknown one fails, listing the tables",
        field="tables",
        parse=tables,
    ),
    Opt(
        "metadataColumns",
        "`none`",
        "read: the metadata columns a read adds after the table's columns (the default schema): "
        f"`none`, `all`, or a comma list of {', '.join(f'`{n}`' for n in METADATA_NAMES)} "
        "(always in that order). Each one costs the read its transfer to the JVM; filters on `_step`, "
        "`_commit_timestamp`, `_region` and `_table` prune steps once the column is there. A "
        "schema given with `.schema(...)` picks them instead",
        field="metadata_columns",
        parse=metadata_names,
        default=(),
    ),
    Opt(
        "startingStep",
        "`earliest`",
        "read: `earliest` \\| `latest` \\| a step number, at most the next step (past it: "
        "`StepNotCommitted` naming the committed steps `[first, next)`)",
        field="starting_step",
        parse=step_or("earliest", "latest"),
        minimum=0,
        default="earliest",
    ),
    Opt(
        "startingTimestamp",
        "(none)",
        "read: start at the first step committed at or after this time (a step's "
        "`_commit_timestamp`), as Spark's Kafka source: ms since the epoch, or ISO-8601 (no zone:"
        " UTC). Not with `startingStep`. After the last commit: a batch read fails naming the "
        "steps and their commit times; a stream starts at the next step (a time in the future "
        "fails). Before the retained steps: the expired-step rule (`failOnDataLoss`)",
        field="starting_timestamp_ms",
        parse=timestamp,
    ),
    Opt(
        "startingEventTime",
        "(none)",
        "read: start at the first step whose recorded event time (`eventTimeColumn` of its "
        "writer) reaches this time (its `_event_time_max` at or after it): ms since the epoch "
        "or ISO-8601. Steps written without an event-time column are never the start. Not "
        "with `startingStep` or `startingTimestamp`",
        field="starting_event_time_ms",
        parse=timestamp,
    ),
    Opt(
        "endingStep",
        "(latest)",
        "batch read: first step not read; past the next step, or below `startingStep`, fails "
        "naming the committed steps",
        field="ending_step",
        parse=integer,
        minimum=0,
    ),
    Opt(
        "endingTimestamp",
        "(latest)",
        "batch read: read the steps committed before this time (exclusive, as Kafka's ending "
        "offsets: it ends at the first step committed at or after it; after the last commit: "
        "everything). Not with `endingStep`",
        field="ending_timestamp_ms",
        parse=timestamp,
    ),
    Opt(
        "maxStepsPerTrigger",
        "(none)",
        "stream read: at most this many steps per micro-batch",
        field="max_steps_per_trigger",
        parse=integer,
        minimum=1,
    ),
    Opt(
        "maxRowsPerTrigger",
        "(none)",
        "stream read: about this many rows per micro-batch (whole steps; `ReadMaxRows`)",
        field="max_rows_per_trigger",
        parse=integer,
        minimum=1,
    ),
    Opt(
        "maxBytesPerTrigger",
        "(none)",
        "stream read: about this many bytes per micro-batch (`ReadMaxBytes`)",
        field="max_bytes_per_trigger",
        parse=integer,
        minimum=1,
    ),
    Opt(
        "minRowsPerTrigger",
        "(none)",
        "stream read: wait for this many rows (`ReadMinRows`), at most `maxTriggerDelay`",
        field="min_rows_per_trigger",
        parse=integer,
        minimum=1,
    ),
    Opt(
        "maxTriggerDelay",
        "`15m`",
        "stream read, with `minRowsPerTrigger` (alone it is refused): once this long passed since"
        " the last batch (or the query's start), a smaller batch reads the rows there are, as "
        "Spark's Kafka source does with `minOffsetsPerTrigger`. A Spark duration: `500ms`, `2s`, "
        "`15m`, `1h` (no unit: ms). Unlike Kafka's source, the first batch of a run waits too. "
        "`availableNow` reads everything anyway",
        field="max_trigger_delay_ms",
        parse=duration,
        default=15 * 60_000,
    ),
    Opt(
        "minPartitions",
        "the driver's cores",
        "read: plan at least this many Spark tasks, as Spark's Kafka source does: a step larger "
        "than a task's share is split into windows of its entries (never inside an entry), so one"
        " big step in one region uses every core. By default a read is split only into pieces of "
        "at least 100,000 rows; given explicitly, even small reads are split. A Python data "
        "source cannot read `spark.default.parallelism`, hence the driver's cores: set it on a "
        "cluster",
        field="min_partitions",
        parse=integer,
        minimum=1,
    ),
    Opt(
        "maxRowsPerPartition",
        "`1000000`",
        "read: at most about this many rows per Spark task (whole steps share a task up to it; a "
        "larger step is split). Rows and keys (`_sequence`, `_row`) are the same whichever task "
        "reads a row",
        field="max_rows_per_partition",
        parse=integer,
        minimum=1,
        default=1_000_000,
    ),
    Opt(
        "failOnDataLoss",
        "`true`",
        "read: an expired step (or a lost WAL) fails with the available range, a step "
        "recorded lost by `durablewal repair` fails naming it; `false` skips them with"
        " a warning. A damaged checkpoint offset (negative, not a number, not JSON of this "
        "source, another namespace's) is `CorruptOffset` either way: it never re-delivers",
        field="fail_on_data_loss",
        parse=boolean,
        default=True,
    ),
    Opt(
        "readerId",
        "(none)",
        "stream read: record committed steps under this id",
        field="reader_id",
        parse=text,
    ),
    Opt(
        "holdRetention",
        "`false`",
        "stream read (with `readerId`): retention never expires a step this reader has not committed",
        field="hold_retention",
        parse=boolean,
        default=False,
    ),
    Opt(
        "retentionSteps",
        "(none)",
        "write: keep at most this many newest steps (sets the namespace's policy)",
        field="retention_steps",
        parse=retention_limit,
        minimum=1,
    ),
    Opt(
        "retentionMs",
        "(none)",
        "write: keep steps this long (sets the namespace's policy)",
        field="retention_ms",
        parse=retention_limit,
        minimum=1,
    ),
    Opt(
        "autoClean",
        "`true`",
        "write: the query's driver runs the cleaner every `cleanIntervalMs`",
        field="auto_clean",
        parse=boolean,
        default=True,
    ),
    Opt(
        "cleanIntervalMs",
        "`60000`",
        "write: time between cleaner passes (shared by every writer of the namespace)",
        field="clean_interval_ms",
        parse=integer,
        minimum=0,
        default=60_000,
    ),
    Opt(
        "cleanGraceMs",
        "`3600000`",
        "write: the cleaner keeps uncommitted entries younger than this, and frees older "
        "ones (killed or failed task attempts, replayed batches) on the file backend with no "
        "retention policy; set it above your longest micro-batch",
        field="clean_grace_ms",
        parse=integer,
        minimum=0,
        default=DEFAULT_GRACE_MS,
    ),
    Opt("checkpointLocation", "(none)", "Spark's own option, accepted and ignored here"),
    Opt("queryName", "(none)", "Spark's own option (`.queryName(...)`), accepted and ignored here"),
    Opt("paths", "(none)", "Spark's own option for `.load([p1, p2])`: one WAL root is accepted"),
)
OPTIONS: dict[str, Opt] = {o.name: o for o in OPTION_TABLE if not o.passthrough}


def default(name: str) -> Any:
    """The parsed default of option ``name``."""
    return OPTIONS[name].default


def markdown() -> str:
    """docs/options.md's options table (its links are relative to docs/)."""
    head = "| option | default | meaning |\n|---|---|---|\n"
    return head + "".join(f"| `{o.name}` | {o.shown} | {o.doc} |\n" for o in OPTION_TABLE)


if __name__ == "__main__":
    print(markdown(), end="")
