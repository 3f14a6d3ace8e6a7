"""A throwaway certificate authority and a broker keystore for the TLS listener of tests.

:func:`make_ca_and_server` writes, into one folder:

* ``ca.key`` / ``ca.pem``: a self-signed CA (the certificate clients trust:
  ``ssl_cafile`` / ``ssl.ca.location``);
* ``server.key`` / ``server.pem``: the broker's key and its certificate, signed by the
  CA, valid for ``IP:127.0.0.1`` and ``DNS:localhost`` (so host name checks pass);
* ``server.p12``: the broker's key and certificate chain as a PKCS12 keystore, the
  format Kafka reads with ``ssl.keystore.type=PKCS12``, under ``password``.

Made with the ``openssl`` command line (no Python crypto package needed); ``keytool``
only lists the keystore, so a keystore Java cannot read fails here, not in the broker.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

DAYS = "2"  # a test CA: short-lived on purpose
SAN = "subjectAltName=IP:127.0.0.1,DNS:localhost"


def _run(*args: str, cwd: Path, password: str | None = None) -> None:
    """Run a tool; the keystore password goes through the environment, not argv."""
    env = {**os.environ, "KEYSTORE_PASSWORD": password} if password else None
    done = subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}):\n"
                           f"{done.stdout}{done.stderr}")


def make_ca_and_server(folder: Path, password: str) -> Path:
    """Write ``ca.pem`` and ``server.p12`` (see the module docstring); return ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    _run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256",
         "-days", DAYS, "-subj", "/CN=pyspark_durable test CA",
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign",
         "-keyout", "ca.key", "-out", "ca.pem", cwd=folder)
    _run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-sha256",
         "-subj", "/CN=localhost", "-keyout", "server.key", "-out", "server.csr", cwd=folder)
    (folder / "server.ext").write_text(
        f"{SAN}\nbasicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n")
    _run("openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
         "-CAcreateserial", "-days", DAYS, "-sha256", "-extfile", "server.ext",
         "-out", "server.pem", cwd=folder)
    _run("openssl", "pkcs12", "-export", "-in", "server.pem", "-inkey", "server.key",
         "-certfile", "ca.pem", "-name", "broker", "-out", "server.p12",
         "-passout", "env:KEYSTORE_PASSWORD", cwd=folder, password=password)
    _run("keytool", "-list", "-keystore", "server.p12", "-storetype", "PKCS12",
         "-storepass:env", "KEYSTORE_PASSWORD", cwd=folder, password=password)
    return folder
