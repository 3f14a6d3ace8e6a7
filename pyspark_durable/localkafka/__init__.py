"""Apache Kafka on this machine, for trying the Kafka backend and for the test suite.

:mod:`.cluster` starts KRaft nodes from the jars ``jars/kafka-broker/pom.xml`` resolves
(one implementation for ``durablewal kafka`` and the tests' harness); :mod:`.service`
is what ``durablewal kafka start|stop|status`` keeps in its folder.
"""
