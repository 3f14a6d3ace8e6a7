"""Java properties files, as Kafka's tools read their ``--command-config``: the format
of ``durablewal --kafka-config FILE``."""

from __future__ import annotations

from pyspark_durable.config_files import read_config_text
from pyspark_durable.errors import ConfigError

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    r"""Java properties escapes: ``\t \n \r \f \uXXXX``, else ``\c`` is ``c``."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c != "\\" or i + 1 == len(text):
            out.append(c)
            i += 1
            continue
        n = text[i + 1]
        if n == "u" and i + 6 <= len(text):
            try:
                out.append(chr(int(text[i + 2:i + 6], 16)))
                i += 6
                continue
            except ValueError:
                pass
        out.append(_ESCAPES.get(n, n))
        i += 2
    return "".join(out)


def read_properties(text: str, source: str = "properties") -> dict[str, str]:
    """A Java properties file (``java.util.Properties.load``): ``key=value``,
    ``key: value`` or ``key value``; ``#`` and ``!`` comments; a line ending in an
    odd number of backslashes continues on the next. A malformed line is named by its
    number only: its text may hold a secret."""
    props: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        number, line = i + 1, lines[i].lstrip()
        i += 1
        if not line or line[0] in "#!":
            continue
        while (len(line) - len(line.rstrip("\\"))) % 2 == 1 and i < len(lines):
            line = line[:-1] + lines[i].lstrip()
            i += 1
        j = 0
        while j < len(line) and line[j] not in "=: \t\f":
            j += 2 if line[j] == "\\" else 1
        key = _unescape(line[:j])
        rest = line[j:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        if not key:
            raise ConfigError(f"{source} line {number}: no key")
        props[key] = _unescape(rest)
    return props


def kafka_config_file(path: str) -> dict[str, str]:
    """The client settings of ``--kafka-config FILE``."""
    return read_properties(read_config_text(path, "--kafka-config"), f"--kafka-config {path}")
