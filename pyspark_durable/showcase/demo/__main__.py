"""``python -m pyspark_durable.showcase.demo``: the demo, and how its children start
(``durablewal demo`` is the way to type it)."""

import sys

from pyspark_durable.showcase.demo import main

sys.exit(main())
