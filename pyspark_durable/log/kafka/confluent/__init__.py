"""The Kafka log's librdkafka client (confluent-kafka): options, errors, sends, reads, topics.

:mod:`pyspark_durable.log.kafka` runs the same log protocol over either client; this
package is the confluent-kafka one, chosen with ``client=confluent``
(``pyspark_durable[kafka]``), the default client when installed: kafka-python
moves ~70-100 MB/s on this machine and librdkafka several times that, in C threads
that do not hold the GIL (:func:`~pyspark_durable.log.kafka.settings.resolve_client`).
Everything here imports ``confluent_kafka``, and only
:func:`~pyspark_durable.log.kafka.settings.client_for` imports this package, so a
process on the other client never loads librdkafka. Its modules, from the top down
(each imports only those below it)::

    sender   ConfluentSender: the process's idempotent producer per settings, its
             delivery thread
    reader   ConfluentReader: a consumer assigned to partition 0 of a topic
    admin    ConfluentAdmin: topics listed, created, configured, cut
    errors   librdkafka's errors as typed errors; a client built (a refused property
             named)
    config   the producer's, consumers' and admin client's properties (kafka-python
             names translated); librdkafka's OIDC; its log lines
    login    a refused login told within a second (the admin's error_cb watched)

Implementation notes (why):

* **Options.** librdkafka validates property names and values itself when a client is
  built; its refusal becomes :class:`~pyspark_durable.errors.ConfigError`
  (:func:`~pyspark_durable.log.kafka.confluent.errors.build`).
* **One producer per process and settings** is shared by every store that uses them:
  an idempotent producer can spend ~0.5 s acquiring its producer id before its first
  delivery, which a producer per store would make every reopen pay.
* **A synchronous append** serves its own delivery reports
  in its own thread, in short flushes, while the delivery thread pauses
  (:meth:`~pyspark_durable.log.kafka.confluent.sender.ConfluentSender.wait` says why).
"""

from pyspark_durable.log.kafka.api import KafkaClient
from pyspark_durable.log.kafka.confluent.admin import ConfluentAdmin
from pyspark_durable.log.kafka.confluent.config import librdkafka_configs
from pyspark_durable.log.kafka.confluent.reader import ConfluentReader
from pyspark_durable.log.kafka.confluent.sender import shared_sender

CLIENT = KafkaClient("confluent", configs=librdkafka_configs, reader=ConfluentReader,
                     sender=shared_sender, admin=ConfluentAdmin)
