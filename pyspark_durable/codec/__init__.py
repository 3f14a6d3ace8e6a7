"""Keys, values and payload encodings of log entries (the bottom layer).

- ``keys``: the 26-byte entry key and the value's version byte;
- ``payload``: the payload codecs, ``arrow``, ``avro`` and ``raw``;
- ``casts``: Arrow casts that give nulls back where pyarrow's own cast breaks on them.
"""

from pyspark_durable.codec.keys import (
    KEY_SIZE,
    EntryKey,
    decode_key,
    decode_value,
    encode_value,
)
from pyspark_durable.codec.payload import CODECS, PayloadCodec, avro_schema, codec_for

__all__ = [
    "CODECS",
    "KEY_SIZE",
    "EntryKey",
    "PayloadCodec",
    "avro_schema",
    "codec_for",
    "decode_key",
    "decode_value",
    "encode_value",
]
