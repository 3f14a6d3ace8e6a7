"""``python -m pyspark_durable ...`` is the ``durablewal`` command (same arguments)."""

from pyspark_durable.cli import main

raise SystemExit(main())
