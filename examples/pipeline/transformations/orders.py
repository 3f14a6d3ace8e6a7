"""Orders from one durablewal namespace, the large ones into another, exactly once.

`spark` is the pipeline's Connect session, which spark-pipelines injects. A streaming
table keeps the rows read from the WAL; an append flow writes the large ones to a
durablewal sink (a sink, since durablewal is a data source, not a catalog table).
"""

from pyspark import pipelines as dp

import pyspark_durable

pyspark_durable.register(spark)  # noqa: F821

WAL_IN = spark.conf.get("durablewal.example.in")  # noqa: F821
WAL_OUT = spark.conf.get("durablewal.example.out")  # noqa: F821


@dp.table(comment="Every order in the orders WAL, read exactly once.")
def orders():
    return (spark.readStream.format("durablewal")  # noqa: F821
            .option("namespace", "shop").option("tables", "orders")
            .load(WAL_IN)
            .select("order_id", "amount"))


dp.create_sink("large_orders_wal", format="durablewal",
               options={"path": WAL_OUT, "namespace": "shop", "table": "large_orders"})


@dp.append_flow(target="large_orders_wal")
def large_orders():
    return spark.readStream.table("orders").where("amount >= 100")  # noqa: F821
