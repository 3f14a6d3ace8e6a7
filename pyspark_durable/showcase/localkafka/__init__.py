"""Apache Kafka on this machine, for trying the Kafka backend and for the test suite.

One implementation for ``durablewal kafka`` and the tests' harness: KRaft nodes started
from Apache Kafka's jars the lock file ``kafka-jars.txt`` lists, fetched from Maven
Central once into a cache folder (no Maven, no source checkout needed).

===============  ==================================================================
module           what it holds
===============  ==================================================================
``service``      what ``durablewal kafka start|stop|status`` keeps in its folder
``cluster``      a cluster: format, start, wait until ready, kill, restart, stop
``node``         one node: its folder and ports, its process, tied to its caller
``settings``     a node's ``server.properties``: listeners, SASL, TLS, OAUTHBEARER
``jars``         Apache Kafka's jars of the lock file, fetched once, verified, cached
``ports``        free TCP ports on 127.0.0.1, outside the ephemeral range
===============  ==================================================================
"""
