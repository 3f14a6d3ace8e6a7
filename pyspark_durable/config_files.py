"""Small configuration files a user names (``--kafka-config FILE``, an endpoint's YAML),
read in one place with a bound.

A name given on a command line can be anything: ``/dev/zero`` (endless), a FIFO (a
read that waits for a writer forever), ``/dev/stdin``, a folder, or a log file of many
gigabytes. Reading such a thing whole hangs the tool or exhausts the host's memory, so
only a regular file is read, and at most ``MAX_BYTES`` of it.
"""

from __future__ import annotations

import os
import stat

from pyspark_durable.errors import ConfigError

MAX_BYTES = 1 << 20  # a client.properties or an endpoint's YAML is a few KiB


def read_config_text(path: str | os.PathLike[str], what: str) -> str:
    """The UTF-8 text of the regular file ``path`` (at most ``MAX_BYTES``); ``what`` names
    the option in the error (``--kafka-config``). Anything else is a ``ConfigError``
    that says what the path is, without reading a byte of it."""
    try:
        # O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"cannot read {what} {path}: it is {_kind(info.st_mode)}, "
                              "not a regular file")
        if info.st_size > MAX_BYTES:
            raise ConfigError(f"cannot read {what} {path}: {info.st_size:,} bytes, more "
                              f"than a configuration file's {MAX_BYTES:,}")
        chunks, size = [], 0
        while size <= MAX_BYTES:  # the file may grow after fstat: read one byte past
            chunk = os.read(fd, MAX_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > MAX_BYTES:
            raise ConfigError(f"cannot read {what} {path}: more than a configuration "
                              f"file's {MAX_BYTES:,} bytes")
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"cannot read {what} {path}: not UTF-8 text (byte {exc.start})") \
            from None


def _kind(mode: int) -> str:
    """What a path that is not a regular file is, in a user's words."""
    for test, kind in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a regular file"
