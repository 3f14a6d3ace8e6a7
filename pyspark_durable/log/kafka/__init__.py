"""The Kafka log: the distributed backend (any Kafka-protocol broker), on either client.

The modules, from the store down (each imports only modules below it, and neither
client anything of the other), and what each is for:

=========================  ========================================================================
module                     for
=========================  ========================================================================
``store``                  KafkaLogStore: a namespace's logs as topics, its snapshots
``log``                    KafkaLog: one log over a Partition, low watermark from the Registry
``registry``               Registry: the snapshots topic as a map; the deletion rule
``partition``              Partition: partition 0 of a topic: appends, both ends, scans
``pool``                   ClientPool: the store's one sender and its bounded idle readers
``confluent.sender``       the process's idempotent producer per settings, its delivery thread
``confluent.reader``       a librdkafka consumer assigned to partition 0 of a topic
``confluent.admin``        topics listed, created, configured, cut with librdkafka's AdminClient
``confluent.errors``       librdkafka's errors as typed errors; a client built
``confluent.config``       librdkafka's properties of each client; its OIDC; its log lines
``confluent.login``        a refused login on librdkafka told within a second (error_cb)
``kafka_python.admin``     topics listed, created, configured, cut with KafkaAdminClient
``kafka_python.sender``    a KafkaProducer, replaced when kafka-python left it unusable
``kafka_python.reader``    a KafkaConsumer assigned to partition 0 of a topic
``kafka_python.errors``    kafka-python's errors as typed errors
``kafka_python.config``    kafka-python's kwargs of each client; no topic auto-creation
``kafka_python.tokens``    the OAUTHBEARER token provider kafka-python asks at each login
``kafka_python.login``     a refused login on kafka-python told within a second
``settings``               KafkaSettings: options parsed; client_for, where a client is chosen
``acls``                   the rights (ACLs) of each role; a refusal as AccessDenied naming the ACL
``auth``                   security options (JAAS translated); a refused login as a typed error
``oauth``                  OAuth2 client credentials: tokens fetched, shared, asked after a failure
``topics``                 OneTopicRule (one partition, no broker-side retention); topic configs
``api``                    Reader, Sender, TopicAdmin: what each client implements; KafkaClient
``spelling``               normalize_key: one spelling rule for option keys
``probe``                  broker_reachability: which brokers are down, for error messages
``listener``               check_listener: a wrong security protocol named before the first request
``transient``              which failures a retry can outlast: the one table both clients use
=========================  ========================================================================

Each client is a package (:mod:`~pyspark_durable.log.kafka.confluent`,
:mod:`~pyspark_durable.log.kafka.kafka_python`) holding all of its own code, whose
docstring maps its modules; what both clients share (options, rights, security
options, OAuth tokens, the transient table) lies outside them. A client stands above
``settings``, whose parsed options it is handed: ``settings`` loads the chosen one by
its name (``client_for``), never by an import.

The protocol is written once against :mod:`~pyspark_durable.log.kafka.api`, with one
implementation per client, each imported only when chosen (option ``client``:
``confluent``, the default when installed, or ``kafka-python``, the pure-Python
fallback; see :func:`~pyspark_durable.log.kafka.settings.resolve_client`). Both run the
same contract, WAL and crash tests. Nothing is imported here, so that choosing a client
loads only that client.

Mapping (one namespace)::

    {namespace}_{log}          one topic per log, exactly ONE partition: region logs
                               are {namespace}_region_{id}, the WAL's own log
                               {namespace}_commits
    {namespace}_snapshots      the namespace's small state, compacted: the registry
                               (pyspark_durable.log.kafka.registry)

Options and their spelling (``kafka.bootstrap.servers`` = ``bootstrap_servers``):
see :mod:`~pyspark_durable.log.kafka.settings`.

Design rules (why):

* **Explicit topics.** A produce or metadata request for an unknown topic may
  auto-create it (``auto.create.topics.enable``, on by default) with the broker's
  ``num.partitions`` and its 7-day retention. Topics are created with the admin
  client before the first append, with infinite retention; an existing topic is
  verified to have one partition and, opened for writing, no broker-side retention
  (:meth:`~pyspark_durable.log.kafka.topics.OneTopicRule.ensure`).
  A log name may not be ``snapshots`` or end in ``_snapshots``, so a topic ending in
  ``_snapshots`` is always the snapshots topic of exactly one namespace: that is
  how ``KafkaLogStore.list_namespaces`` finds namespaces, and the registry is
  how ``KafkaLogStore.list_logs`` tells namespace ``a``'s log ``b_commits`` from
  namespace ``a_b``'s ``commits``. Those two still share one topic: do not use
  namespaces whose name is another namespace's name plus ``_`` plus a log prefix.
* **assign()/seek(), never consumer groups.** A reader wants exact offsets, no
  group join (slow) and no committed group offsets; ``auto_offset_reset='none'``
  makes a missing offset an error instead of a silent jump.
* **Reads and appends** of a topic: :mod:`~pyspark_durable.log.kafka.partition`
  (the high watermark, acknowledged ranges, durable appends).
* **Deletion and snapshots**: :mod:`~pyspark_durable.log.kafka.registry` (the
  logical low watermark before DeleteRecords; a deleted snapshot version is a
  tombstone, which compaction removes, then the tombstone).
"""
