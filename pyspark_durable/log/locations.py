"""Where a WAL lives, from the one string a user gives as its path.

``.save(p)``, ``.load(p)``, ``.start(p)``, the Python API's ``options.path`` and the
CLI's PATH all name the WAL's root. A plain path is a local folder (the file log);
``s3://bucket/prefix`` is a bucket (the S3 log). Any other URL, of a scheme the WAL
cannot store to (``s3a://``, ``gs://``, ``hdfs://``, a typo like ``s3:/b``), is refused
by name: taken for a local folder it would write a folder named ``s3a:`` in the working
directory, and the user would lose the WAL with the machine.
"""

from __future__ import annotations

import re

from pyspark_durable.errors import ConfigError

# ``scheme:`` then a slash: what a URL looks like (RFC 3986's scheme characters). Two
# characters at least, so that nothing here reads a Windows drive (``C:/``) as a scheme.
URL_RE = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]+):/")
SCHEMES = {"s3": "s3"}  # URL scheme -> backend
HINTS = {
    "s3a": "s3a:// is Hadoop's S3 connector's scheme: give the same bucket as s3://",
    "s3n": "s3n:// is Hadoop's old S3 scheme: give the same bucket as s3://",
    "file": "give a local folder as a plain path, without file://",
}


def backend_of_path(path: str) -> str | None:
    """The backend a path names (``s3`` for ``s3://...``), None for a local folder; a URL
    of any other scheme is a :class:`ConfigError` naming it."""
    match = URL_RE.match(str(path))
    if match is None:
        return None
    scheme = match["scheme"].lower()
    if scheme in SCHEMES and str(path)[len(scheme):].startswith("://"):
        return SCHEMES[scheme]
    hint = HINTS.get(scheme) or (
        f"a WAL is stored in a local folder (a plain path) or in S3 (s3://bucket/prefix); "
        f"the scheme {scheme!r} is neither")
    if scheme in SCHEMES:
        hint = f"an S3 location is spelled s3://bucket/prefix (two slashes), not {path!r}"
    raise ConfigError(f"path {str(path)!r} is not a location the WAL can store to: {hint}")
