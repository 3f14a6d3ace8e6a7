"""kafka-python (pure Python) as the Kafka log's client: options, errors, sends, reads, topics.

:mod:`pyspark_durable.log.kafka` runs the same log protocol over either client; this
package is the kafka-python one, the pure-Python fallback, chosen with
``client=kafka-python``. Everything here imports kafka-python, and only
:func:`~pyspark_durable.log.kafka.settings.client_for` imports this package: importing
kafka-python costs about a quarter of a second, which every Python process Spark
starts for a streaming source would otherwise pay even on the confluent client. Its
modules, from the top down (each imports only those below it)::

    admin    KafkaPythonAdmin: topics listed, created, configured, cut
    sender   KafkaPythonSender: a producer, replaced when kafka-python left it unusable
    reader   KafkaPythonReader: a consumer assigned to partition 0 of a topic
    errors   kafka-python's errors as typed errors
    config   the producer's, consumer's and admin client's kwargs; clients kept from
             auto-creating topics
    tokens   the OAUTHBEARER token provider, from the sasl.oauthbearer.* options
    login    a refused login told within a second (one connection made first)

Several modules work around kafka-python 3.0.12's faults, each where it bites and
each saying which: a producer whose expired batch left it without a producer id
(:mod:`~pyspark_durable.log.kafka.kafka_python.sender`), metadata requests that
auto-create topics (:func:`~pyspark_durable.log.kafka.kafka_python.config.no_auto_create`),
topic-config errors dropped (:mod:`~pyspark_durable.log.kafka.kafka_python.admin`), a
SaslAuthenticate error lost (:mod:`~pyspark_durable.log.kafka.kafka_python.login`).
"""

from pyspark_durable.log.kafka.api import KafkaClient
from pyspark_durable.log.kafka.kafka_python.admin import KafkaPythonAdmin
from pyspark_durable.log.kafka.kafka_python.config import OPTION_KEYS, client_configs, default_of
from pyspark_durable.log.kafka.kafka_python.reader import KafkaPythonReader
from pyspark_durable.log.kafka.kafka_python.sender import KafkaPythonSender

CLIENT = KafkaClient("kafka-python", configs=client_configs, reader=KafkaPythonReader,
                     sender=KafkaPythonSender, admin=KafkaPythonAdmin,
                     keys=lambda: OPTION_KEYS, default_of=default_of)
