"""The S3 client of one store: options, credentials, retries, and typed errors.

boto3 is the client: it is the standard one, and it brings what a user of a bucket
expects without a line of ours: the AWS credential chain (``AWS_ACCESS_KEY_ID`` and the
other variables, ``AWS_ENDPOINT_URL``, profiles, web identity for pods, container and
instance roles), and retry modes with backoff for throttling and dropped connections.
``s3.*`` options override the chain. Every client error leaves this module typed
(:func:`typed`), naming the bucket and what to fix, never a secret.
"""

from __future__ import annotations

import base64
import os
import threading
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

from pyspark_durable.errors import (
    AccessDenied,
    AuthenticationFailed,
    BackendUnavailable,
    ConfigError,
    LogNotFound,
)
from pyspark_durable.log.file.frames import crc32
from pyspark_durable.secrets import remember

try:
    from botocore.exceptions import BotoCoreError, ClientError
except ModuleNotFoundError as _missing:
    raise ConfigError("the s3 backend needs boto3: pip install 'pyspark_durable[s3]'") from _missing

ERRORS = (BotoCoreError, ClientError)  # what a boto3 call raises

SCHEME = "s3://"
# option -> what it overrides in the AWS chain
OPTIONS = {
    "path": "the WAL's root, s3://bucket/prefix",
    "endpoint_url": "AWS_ENDPOINT_URL: an S3-compatible server (http://host:port)",
    "region": "AWS_REGION",
    "access_key_id": "AWS_ACCESS_KEY_ID",
    "secret_access_key": "AWS_SECRET_ACCESS_KEY",
    "session_token": "AWS_SESSION_TOKEN",
    "profile": "AWS_PROFILE: a profile of ~/.aws/config",
    "max_attempts": "attempts per request, retries with backoff included (default 5)",
    "retry_mode": "botocore's retry mode: standard (default) or adaptive",
    "connect_timeout_s": "seconds to connect (default 10)",
    "read_timeout_s": "seconds to wait for an answer (default 60)",
}
RETRY_MODES = ("standard", "adaptive", "legacy")
# codes S3 and S3-compatible servers give for a missing object
MISSING = ("NoSuchKey", "404", "NotFound")
PRECONDITION = ("PreconditionFailed", "412")
THROTTLED = ("SlowDown", "503", "Throttling", "ThrottlingException", "RequestLimitExceeded",
             "TooManyRequests", "429")
BAD_KEYS = ("InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken",
            "InvalidClientTokenId", "AuthorizationHeaderMalformed")


def split_path(path: str) -> tuple[str, str]:
    """``s3://bucket/a/b`` as ``("bucket", "a/b/")`` (the prefix ends in ``/`` unless empty)."""
    text = str(path)
    if not text.startswith(SCHEME):
        raise ConfigError(f"path {text!r} is not an S3 location: give s3://bucket/prefix")
    bucket, _, prefix = text[len(SCHEME):].partition("/")
    if not bucket or not all(c.isalnum() or c in ".-_" for c in bucket):
        raise ConfigError(f"path {text!r} names no bucket: give s3://bucket/prefix")
    prefix = "/".join(p for p in prefix.split("/") if p)
    if any(p in (".", "..") for p in prefix.split("/")):
        raise ConfigError(f"path {text!r}: a prefix of '.' or '..' parts names no place in a bucket")
    return bucket, f"{prefix}/" if prefix else ""


@dataclass(frozen=True)
class S3Config:
    """The options of an S3 store, parsed; secrets are kept out of ``repr``."""

    bucket: str
    prefix: str
    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    profile: str | None = None
    max_attempts: int = 5
    retry_mode: str = "standard"
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 60.0

    @staticmethod
    def parse(options: Mapping[str, Any]) -> S3Config:
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise ConfigError(f"unknown s3 backend options {unknown}; valid: {', '.join(OPTIONS)}")
        remember(options)
        if not options.get("path"):
            raise ConfigError("the s3 backend needs a path: s3://bucket/prefix")
        bucket, prefix = split_path(options["path"])
        values: dict[str, Any] = {k: options[k] for k in OPTIONS if k != "path"
                                  and options.get(k) not in (None, "")}
        try:
            for key in ("max_attempts",):
                if key in values:
                    values[key] = int(values[key])
            for key in ("connect_timeout_s", "read_timeout_s"):
                if key in values:
                    values[key] = float(values[key])
        except (TypeError, ValueError):
            raise ConfigError(f"s3 options max_attempts, connect_timeout_s and read_timeout_s "
                              f"are numbers: {values.get('max_attempts')!r}, "
                              f"{values.get('connect_timeout_s')!r}, "
                              f"{values.get('read_timeout_s')!r}") from None
        if values.get("max_attempts", 1) < 1:
            raise ConfigError(f"s3 option max_attempts={values['max_attempts']} is below 1")
        if values.get("retry_mode", "standard") not in RETRY_MODES:
            raise ConfigError(f"s3 option retry_mode={values['retry_mode']!r}; valid: "
                              f"{', '.join(RETRY_MODES)}")
        if ("access_key_id" in values) != ("secret_access_key" in values):
            raise ConfigError("s3 options access_key_id and secret_access_key go together: "
                              "give both, or neither (the AWS credential chain)")
        return S3Config(bucket, prefix, **values)

    @property
    def url(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.prefix}"

    def endpoint(self) -> str:
        """Where requests go, for messages: the endpoint given, or AWS's."""
        return self.endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get(
            "AWS_ENDPOINT_URL") or "AWS S3"


_clients: dict[S3Config, Any] = {}
_clients_lock = threading.Lock()


def client_for(config: S3Config) -> Any:
    """One boto3 client per config and process (clients are thread-safe, and making one
    costs ~50 ms): stores of one process share its connection pool."""
    with _clients_lock:
        client = _clients.get(config)
        if client is None:
            client = _clients[config] = _make_client(config)
        return client


def _make_client(config: S3Config) -> Any:
    import boto3
    from botocore.config import Config
    from botocore.exceptions import ProfileNotFound
    if config.secret_access_key:
        remember({"secret_access_key": config.secret_access_key})
    if os.environ.get("AWS_SECRET_ACCESS_KEY"):
        remember({"secret_access_key": os.environ["AWS_SECRET_ACCESS_KEY"]})
    try:
        session = boto3.session.Session(profile_name=config.profile)
    except ProfileNotFound:
        raise ConfigError(f"s3 profile {config.profile!r} is not in the AWS config files "
                          "(~/.aws/config, ~/.aws/credentials)") from None
    botocore_config = Config(
        retries={"mode": config.retry_mode, "total_max_attempts": config.max_attempts},
        connect_timeout=config.connect_timeout_s,
        read_timeout=config.read_timeout_s,
        max_pool_connections=32,
        # checksums only where S3 requires them: the WAL's frames carry their own CRCs,
        # and several S3-compatible servers refuse the aws-chunked trailers boto3 would
        # send by default
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        s3={"addressing_style": "path"} if config.endpoint_url or os.environ.get(
            "AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL_S3") else None,
    )
    client = session.client(
        "s3",
        endpoint_url=config.endpoint_url,
        region_name=config.region or session.region_name or "us-east-1",
        aws_access_key_id=config.access_key_id,
        aws_secret_access_key=config.secret_access_key,
        aws_session_token=config.session_token,
        config=botocore_config,
    )
    client.meta.events.register("before-parameter-build.s3.PutObject", _with_crc32)
    return client


def _with_crc32(params: dict[str, Any], **_: Any) -> None:
    """Give a PUT its body's CRC-32 (``ChecksumCRC32``), which the server checks against
    what it received: a PUT whose body did not all arrive stores nothing. Without it a
    server may store an empty object when the writer dies between a PUT's headers and its
    body (SeaweedFS 4.48 does), and an entry object, a mark or a snapshot would then sit
    damaged at its key for good. Registered on the client, so no PUT of the backend goes
    without; the header is sent as given (AWS S3, MinIO, R2 and SeaweedFS verify it), not
    as the aws-chunked trailer boto3 would compute by default."""
    body = params.get("Body")
    if isinstance(body, (bytes, bytearray, memoryview)) and "ChecksumCRC32" not in params:
        params["ChecksumCRC32"] = base64.b64encode(crc32(body).to_bytes(4, "big")).decode()


def error_code(exc: BaseException) -> str:
    """The S3 error code of a botocore ``ClientError`` (``""`` for any other error)."""
    response = getattr(exc, "response", None)
    if not isinstance(response, Mapping):
        return ""
    code = str(response.get("Error", {}).get("Code", ""))
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code or str(status or "")


def is_code(exc: BaseException, codes: tuple[str, ...]) -> bool:
    response = getattr(exc, "response", None)
    status = str(response.get("ResponseMetadata", {}).get("HTTPStatusCode", "")) \
        if isinstance(response, Mapping) else ""
    return error_code(exc) in codes or status in codes


def is_transient(exc: BaseException) -> bool:
    """A failure whose request may or may not have been carried out: a dropped or timed
    out connection, a server error, throttling (after the client's own retries)."""
    if isinstance(exc, ClientError):
        response = exc.response.get("ResponseMetadata", {})
        return int(response.get("HTTPStatusCode") or 0) >= 500 or is_code(exc, THROTTLED)
    return isinstance(exc, BotoCoreError) and not _is_credentials_error(exc)


def _is_credentials_error(exc: BaseException) -> bool:
    from botocore.exceptions import NoCredentialsError, PartialCredentialsError

    return isinstance(exc, NoCredentialsError | PartialCredentialsError)


def typed(exc: BaseException, config: S3Config, doing: str, **where: Any) -> NoReturn:
    """Raise ``exc`` (a boto3/botocore error) as a typed error naming the bucket, what
    was being done, and what to fix."""
    url = config.url
    endpoint = config.endpoint()
    code = error_code(exc)
    if _is_credentials_error(exc):
        raise AuthenticationFailed(
            f"no S3 credentials for {url} while {doing}: set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY (or a profile, or a role), or the s3.access_key_id and "
            "s3.secret_access_key options", **where) from None
    if code == "NoSuchBucket":
        raise LogNotFound(f"bucket {config.bucket!r} does not exist at {endpoint} "
                          f"({doing}): create it, or fix the path {url}", **where) from None
    if code in BAD_KEYS:
        raise AuthenticationFailed(
            f"{endpoint} refused the S3 credentials ({code}) while {doing} in {url}: check "
            "the access key id and secret (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, or "
            "s3.access_key_id / s3.secret_access_key) and the session token", **where) from None
    if code in ("AccessDenied", "403", "AllAccessDisabled"):
        raise AccessDenied(
            f"{endpoint} denied {doing} in {url} (AccessDenied): grant the credentials' "
            f"principal {_action(doing)} on arn:aws:s3:::{config.bucket}/{config.prefix}*",
            principal="(the S3 credentials)", operation=_action(doing),
            resource=f"{config.bucket}/{config.prefix}", **where) from None
    if is_transient(exc):
        what = "throttled the requests (503 SlowDown)" if is_code(exc, THROTTLED) else \
            f"could not be reached or failed ({type(exc).__name__}: {_short(exc)})"
        raise BackendUnavailable(
            f"S3 at {endpoint} {what} while {doing} in {url}, after "
            f"{config.max_attempts} attempts with backoff; retry once it is healthy",
            **where) from None
    raise BackendUnavailable(f"S3 at {endpoint} failed {doing} in {url}: {code or type(exc).__name__}"
                             f" ({_short(exc)})", **where) from None


def _action(doing: str) -> str:
    for word, action in (("delet", "s3:DeleteObject"), ("list", "s3:ListBucket"),
                         ("read", "s3:GetObject"), ("writ", "s3:PutObject"),
                         ("creat", "s3:PutObject"), ("append", "s3:PutObject")):
        if word in doing:
            return action
    return "s3:GetObject, s3:PutObject, s3:DeleteObject and s3:ListBucket"


def _short(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__


class PreconditionsIgnored(ConfigError):
    """The store accepted a second create-if-absent of one object: it ignores S3's
    conditional writes, so two writers could both win one offset. Nothing is written."""


_probed: dict[tuple[str, str, str], None] = {}
_probe_lock = threading.Lock()


def probe(client: Any, config: S3Config) -> None:
    """Refuse a store that ignores ``If-None-Match`` (once per bucket and process):
    create one object twice; the second create must fail with 412. The probe object is
    then deleted, which also proves the right to delete that the cleaner needs."""
    ident = (config.endpoint(), config.bucket, config.prefix)
    with _probe_lock:
        if ident in _probed:
            return
        key = f"{config.prefix}.probe/{uuid.uuid4().hex}"
        try:  # some servers make a missing bucket at the first PUT: a typo would write there
            client.head_bucket(Bucket=config.bucket)
        except ERRORS as exc:
            if is_code(exc, ("404", "NoSuchBucket", "NotFound")):
                raise LogNotFound(f"bucket {config.bucket!r} does not exist at "
                                  f"{config.endpoint()}: create it, or fix the path "
                                  f"{config.url}") from None
            typed(exc, config, "looking up the bucket")
        try:
            client.put_object(Bucket=config.bucket, Key=key, Body=b"probe", IfNoneMatch="*")
        except ERRORS as exc:
            typed(exc, config, "creating a probe object")
        try:
            try:
                client.put_object(Bucket=config.bucket, Key=key, Body=b"again", IfNoneMatch="*")
            except ERRORS as exc:  # 412 is the answer hoped for
                if not is_code(exc, PRECONDITION):
                    typed(exc, config, "creating a probe object")
            else:
                raise PreconditionsIgnored(
                    f"S3 at {config.endpoint()} ignores conditional writes (a second PUT "
                    f"with If-None-Match: * of {key} in bucket {config.bucket!r} succeeded, "
                    "where S3 answers 412): two writers could both commit one offset, so "
                    "the WAL refuses this store; use a server that honours If-None-Match "
                    "(AWS S3, R2, MinIO, SeaweedFS >= 4.17)")
        finally:
            try:
                client.delete_object(Bucket=config.bucket, Key=key)
            except ERRORS as exc:
                typed(exc, config, "deleting a probe object (the cleaner deletes objects "
                      "below the retention bound)")
        _probed[ident] = None


def listed(client: Any, config: S3Config, doing: str, where: Mapping[str, Any],
           **kwargs: Any) -> Iterator[dict[str, Any]]:
    """The pages of a ListObjectsV2 of ``config``'s bucket (``kwargs``: Prefix, Delimiter,
    StartAfter...), followed page by page; an error is typed, naming ``doing``."""
    while True:
        try:
            page = client.list_objects_v2(Bucket=config.bucket, **kwargs)
        except ERRORS as exc:
            typed(exc, config, doing, **where)
        yield page
        if not page.get("IsTruncated"):
            return
        kwargs["ContinuationToken"] = page["NextContinuationToken"]
        kwargs.pop("StartAfter", None)


def get_or_none(client: Any, config: S3Config, key: str, doing: str,
                where: Mapping[str, Any]) -> tuple[bytes, dict[str, Any]] | None:
    """(body, the answer's other fields) of an object, None if it does not exist; any other
    error is typed, naming ``doing``."""
    try:
        answer = client.get_object(Bucket=config.bucket, Key=key)
        return answer["Body"].read(), answer
    except ERRORS as exc:
        if is_code(exc, MISSING):
            return None
        typed(exc, config, doing, **where)
