"""A small OAuth2 token endpoint and JWKS on 127.0.0.1, for the OAUTHBEARER tests.

``POST /token`` serves the client-credentials grant (``grant_type=client_credentials``,
client id and secret as HTTP Basic credentials or form fields) with RS256 JWTs
(PyJWT + cryptography); ``GET /jwks`` serves the public key the broker checks them
with. Each client id has a :class:`Client` profile: its secret, its tokens' lifetime,
and what is wrong with its tokens, if anything (another audience, a key the JWKS does
not hold), so one server serves every case of a test module at once. Every token issued
is recorded (:meth:`TokenServer.tokens`), and so is every refused request
(:meth:`TokenServer.refused`); :meth:`TokenServer.wait_for` and
:meth:`TokenServer.wait_refused` wait on their counts, not on a clock. A test rotates a
client's secret by assigning its profile's ``secret``.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

KID = "test-key"


@dataclass
class Client:
    secret: str
    lifetime_s: int = 3600
    audience: str | None = None  # None: the server's audience
    foreign_key: bool = False  # signed by a key the JWKS does not hold (same kid)


@dataclass
class Issued:
    client_id: str
    token: str
    expires: float  # epoch seconds


class TokenServer:
    """The endpoint, serving from a daemon thread until :meth:`stop`."""

    def __init__(self, clients: dict[str, Client], issuer: str, audience: str) -> None:
        self.clients, self.issuer, self.audience = clients, issuer, audience
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._foreign = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._issued: list[Issued] = []
        self._refused: list[str] = []  # the client id of each request refused
        self._changed = threading.Condition()
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_port}"

    def jwks(self) -> dict[str, Any]:
        key = RSAAlgorithm.to_jwk(self._key.public_key(), as_dict=True)
        return {"keys": [{**key, "kid": KID, "use": "sig", "alg": "RS256"}]}

    def issue(self, client_id: str, scope: str | None) -> tuple[str, int]:
        profile = self.clients[client_id]
        now = int(time.time())
        claims = {"iss": self.issuer, "aud": profile.audience or self.audience,
                  "sub": client_id, "iat": now, "exp": now + profile.lifetime_s,
                  "jti": uuid.uuid4().hex, **({"scope": scope} if scope else {})}
        key = self._foreign if profile.foreign_key else self._key
        token = jwt.encode(claims, key, algorithm="RS256", headers={"kid": KID})
        with self._changed:
            self._issued.append(Issued(client_id, token, claims["exp"]))
            self._changed.notify_all()
        return token, profile.lifetime_s

    def tokens(self, client_id: str | None = None) -> list[Issued]:
        with self._changed:
            return [i for i in self._issued if client_id in (None, i.client_id)]

    def wait_for(self, client_id: str, count: int, timeout_s: float) -> list[Issued]:
        """Block until ``count`` tokens were issued to ``client_id``; fails after ``timeout_s``."""
        with self._changed:
            if not self._changed.wait_for(lambda: len(self.tokens(client_id)) >= count, timeout_s):
                raise AssertionError(f"{len(self.tokens(client_id))} tokens issued to "
                                     f"{client_id} within {timeout_s}s, {count} expected")
            return self.tokens(client_id)

    def refuse(self, client_id: str) -> None:
        with self._changed:
            self._refused.append(client_id)
            self._changed.notify_all()

    def refused(self, client_id: str) -> int:
        """How many token requests of ``client_id`` were refused."""
        with self._changed:
            return self._refused.count(client_id)

    def wait_refused(self, client_id: str, count: int, timeout_s: float) -> None:
        """Block until ``count`` requests of ``client_id`` were refused; fails after
        ``timeout_s``."""
        with self._changed:
            if not self._changed.wait_for(lambda: self.refused(client_id) >= count, timeout_s):
                raise AssertionError(f"{self.refused(client_id)} requests of {client_id} "
                                     f"refused within {timeout_s}s, {count} expected")

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._thread.join(10)


def _credentials(handler: BaseHTTPRequestHandler, form: dict[str, str]) -> tuple[str, str]:
    header = handler.headers.get("Authorization", "")
    if header.startswith("Basic "):
        user, _, secret = base64.b64decode(header[6:]).decode().partition(":")
        return urllib.parse.unquote(user), urllib.parse.unquote(secret)
    return form.get("client_id", ""), form.get("client_secret", "")


def _handler(server: TokenServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read no stderr
            pass

        def _reply(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path != "/jwks":
                return self._reply(404, {"error": "not_found"})
            return self._reply(200, server.jwks())

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
            if self.path != "/token":
                return self._reply(404, {"error": "not_found"})
            if form.get("grant_type") != "client_credentials":
                return self._reply(400, {"error": "unsupported_grant_type"})
            client_id, secret = _credentials(self, form)
            profile = server.clients.get(client_id)
            if profile is None or secret != profile.secret:
                server.refuse(client_id)
                return self._reply(401, {"error": "invalid_client"})
            token, lifetime = server.issue(client_id, form.get("scope"))
            return self._reply(200, {"access_token": token, "token_type": "Bearer",
                                     "expires_in": lifetime})

    return Handler
