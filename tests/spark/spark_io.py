"""Small helpers the Spark tests share: a durablewal read or write with a dict of options."""

from __future__ import annotations


def reader(spark, opts: dict, stream: bool = False, **extra):
    """A read with every metadata column (the tests check them) unless ``metadataColumns``
    is given; the default read's own schema is tested on its own."""
    r = (spark.readStream if stream else spark.read).format("durablewal")
    for k, v in {"metadataColumns": "all", **opts, **extra}.items():
        r = r.option(k, v)
    return r.load()


def write(df, opts: dict, **extra) -> None:
    w = df.write.format("durablewal").mode("append")
    for k, v in {**opts, **extra}.items():
        w = w.option(k, v)
    w.save()
