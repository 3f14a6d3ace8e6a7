"""The S3 test harness itself: the SeaweedFS server (tests/s3_server.py) keeps the
promises the S3 backend's tests rely on, and the fault proxy (tests/s3proxy.py) does
to S3 requests what its modes say."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from itertools import count

import pytest
from botocore.exceptions import ClientError, ConnectionClosedError, EndpointConnectionError

from tests.s3_server import Identity, SeaweedS3, seaweed_for_tests
from tests.s3proxy import S3Proxy, s3_proxy

pytestmark = pytest.mark.s3

_buckets = count()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedS3]:
    with seaweed_for_tests(tmp_path_factory.mktemp("seaweed")) as s:
        yield s


@pytest.fixture
def bucket(server: SeaweedS3) -> str:
    return server.make_bucket(f"harness-{os.getpid()}-{next(_buckets)}")


@pytest.fixture
def proxy(server: SeaweedS3) -> Iterator[S3Proxy]:
    with s3_proxy(server.endpoint) as p:
        yield p


def error_of(exc: pytest.ExceptionInfo[ClientError]) -> tuple[str, int]:
    return exc.value.response["Error"]["Code"], exc.value.response["ResponseMetadata"]["HTTPStatusCode"]


def test_conditional_writes_metadata_and_listing(server: SeaweedS3, bucket: str) -> None:
    s3 = server.client()
    first = s3.put_object(Bucket=bucket, Key="k", Body=b"1", IfNoneMatch="*")
    with pytest.raises(ClientError) as exc:
        s3.put_object(Bucket=bucket, Key="k", Body=b"2", IfNoneMatch="*")
    assert error_of(exc) == ("PreconditionFailed", 412)
    s3.put_object(Bucket=bucket, Key="k", Body=b"3", IfMatch=first["ETag"])
    with pytest.raises(ClientError) as exc:
        s3.put_object(Bucket=bucket, Key="k", Body=b"4", IfMatch=first["ETag"])  # stale
    assert error_of(exc) == ("PreconditionFailed", 412)
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"3"

    s3.put_object(Bucket=bucket, Key="m", Body=b"", Metadata={"count": "3"})
    assert s3.head_object(Bucket=bucket, Key="m")["Metadata"] == {"count": "3"}

    for key in ("p/3", "p/1", "p/10", "p/2"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"")
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="p/", StartAfter="p/1")["Contents"]
    assert [o["Key"] for o in listed] == ["p/10", "p/2", "p/3"]


def test_wrong_keys_and_anonymous_requests_are_refused(server: SeaweedS3, bucket: str) -> None:
    from botocore import UNSIGNED
    from botocore.config import Config

    unknown = server.client(Identity("x", "NOSUCHKEY", "secret"))
    with pytest.raises(ClientError) as exc:
        unknown.list_objects_v2(Bucket=bucket)
    assert error_of(exc) == ("InvalidAccessKeyId", 403)
    wrong_secret = server.client(Identity("x", server.admin.access_key, "wrong"))
    with pytest.raises(ClientError) as exc:
        wrong_secret.put_object(Bucket=bucket, Key="k", Body=b"1")
    assert error_of(exc) == ("SignatureDoesNotMatch", 403)

    import boto3

    anonymous = boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1",
                             config=Config(signature_version=UNSIGNED,
                                           retries={"total_max_attempts": 1}))
    for call in (lambda: anonymous.list_objects_v2(Bucket=bucket),
                 lambda: anonymous.put_object(Bucket=bucket, Key="k", Body=b"1")):
        with pytest.raises(ClientError) as exc:
            call()
        assert error_of(exc) == ("AccessDenied", 403)


def test_nodelete_and_readonly_identities(server: SeaweedS3, bucket: str) -> None:
    admin, nodelete, readonly = (server.client(who) for who in ("admin", "nodelete", "readonly"))
    nodelete.put_object(Bucket=bucket, Key="k", Body=b"1", IfNoneMatch="*")
    assert nodelete.get_object(Bucket=bucket, Key="k")["Body"].read() == b"1"
    assert [o["Key"] for o in nodelete.list_objects_v2(Bucket=bucket)["Contents"]] == ["k"]
    with pytest.raises(ClientError) as exc:
        nodelete.delete_object(Bucket=bucket, Key="k")
    assert error_of(exc) == ("AccessDenied", 403)
    batch = nodelete.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "k"}]})
    assert [(e["Key"], e["Code"]) for e in batch["Errors"]] == [("k", "AccessDenied")]

    assert readonly.get_object(Bucket=bucket, Key="k")["Body"].read() == b"1"
    for call in (lambda: readonly.put_object(Bucket=bucket, Key="r", Body=b"1"),
                 lambda: readonly.delete_object(Bucket=bucket, Key="k")):
        with pytest.raises(ClientError) as exc:
            call()
        assert error_of(exc) == ("AccessDenied", 403)

    assert admin.head_object(Bucket=bucket, Key="k")["ContentLength"] == 1
    admin.delete_object(Bucket=bucket, Key="k")
    assert "Contents" not in admin.list_objects_v2(Bucket=bucket)


def test_proxy_passes_every_operation(server: SeaweedS3, bucket: str, proxy: S3Proxy) -> None:
    s3 = server.client(endpoint=proxy.endpoint)
    big = os.urandom(8 << 20)
    s3.put_object(Bucket=bucket, Key="big", Body=big)
    import io

    s3.put_object(Bucket=bucket, Key="file", Body=io.BytesIO(big))  # Expect: 100-continue
    assert s3.get_object(Bucket=bucket, Key="big")["Body"].read() == big
    assert s3.get_object(Bucket=bucket, Key="file")["Body"].read() == big
    assert s3.head_object(Bucket=bucket, Key="big")["ContentLength"] == len(big)
    with pytest.raises(ClientError) as exc:
        s3.put_object(Bucket=bucket, Key="big", Body=b"", IfNoneMatch="*")
    assert error_of(exc) == ("PreconditionFailed", 412)
    s3.delete_object(Bucket=bucket, Key="file")
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["big"]
    assert proxy.requests["PUT"] == 3 and proxy.requests["DELETE"] == 1


def test_proxy_relays_a_chunked_request_and_keeps_the_connection(server: SeaweedS3,
                                                                  bucket: str,
                                                                  proxy: S3Proxy) -> None:
    """A chunked (unsigned, so refused) PUT is framed right: the same connection then
    carries a second request."""
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
        reader = sock.makefile("rb")
        for _ in range(2):
            sock.sendall(f"PUT /{bucket}/chunked HTTP/1.1\r\nHost: 127.0.0.1:{proxy.port}\r\n"
                         "Transfer-Encoding: chunked\r\n\r\n"
                         "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n".encode())
            status = reader.readline()
            length = 0
            while (line := reader.readline()) != b"\r\n":
                name, _, value = line.decode().partition(":")
                length = int(value) if name.lower() == "content-length" else length
            assert status.split()[1] == b"403" and b"AccessDenied" in reader.read(length)
    assert proxy.requests["PUT"] == 2


def test_a_lost_put_answer_was_carried_out(server: SeaweedS3, bucket: str,
                                           proxy: S3Proxy) -> None:
    s3 = server.client(endpoint=proxy.endpoint)
    proxy.lose_next_put_answer(path=r"/lost$")
    s3.put_object(Bucket=bucket, Key="kept", Body=b"k")  # another path: answered
    with pytest.raises(ConnectionClosedError):
        s3.put_object(Bucket=bucket, Key="lost", Body=b"stored", IfNoneMatch="*")
    assert proxy.lost == [("PUT", f"/{bucket}/lost")] and proxy.lost_event.is_set()
    assert proxy.mode == "forward"
    assert server.client().get_object(Bucket=bucket, Key="lost")["Body"].read() == b"stored"
    # a client that retries the create finds its own object there
    proxy.lose_next_put_answer()
    with pytest.raises(ClientError) as exc:
        server.client(endpoint=proxy.endpoint, attempts=3).put_object(
            Bucket=bucket, Key="again", Body=b"1", IfNoneMatch="*")
    assert error_of(exc) == ("PreconditionFailed", 412)
    assert server.client().get_object(Bucket=bucket, Key="again")["Body"].read() == b"1"


def test_throttle_answers_slowdown_without_forwarding(server: SeaweedS3, bucket: str,
                                                     proxy: S3Proxy) -> None:
    s3 = server.client(endpoint=proxy.endpoint)  # one attempt: no retry
    proxy.throttle(2)
    for key in ("a", "b"):
        with pytest.raises(ClientError) as exc:
            s3.put_object(Bucket=bucket, Key=key, Body=b"1")
        assert error_of(exc) == ("SlowDown", 503)
        assert exc.value.response["Error"]["Message"] == "Please reduce your request rate."
    s3.put_object(Bucket=bucket, Key="c", Body=b"1")
    assert proxy.throttled == 2
    assert [o["Key"] for o in server.client().list_objects_v2(Bucket=bucket)["Contents"]] == ["c"]
    proxy.throttle(1)  # botocore retries a SlowDown
    server.client(endpoint=proxy.endpoint, attempts=2).put_object(Bucket=bucket, Key="d", Body=b"1")
    assert proxy.throttled == 3


def test_proxy_down_refuses_then_forwards_again(server: SeaweedS3, bucket: str,
                                                proxy: S3Proxy) -> None:
    s3 = server.client(endpoint=proxy.endpoint)
    s3.put_object(Bucket=bucket, Key="k", Body=b"1")
    proxy.down()
    with pytest.raises(EndpointConnectionError):
        s3.get_object(Bucket=bucket, Key="k")
    proxy.forward()
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"1"


def test_a_killed_server_restarts_with_its_objects(server: SeaweedS3, bucket: str) -> None:
    s3 = server.client()
    s3.put_object(Bucket=bucket, Key="k", Body=b"before the kill")
    pid = server.pid
    server.kill()
    assert not server.alive()
    with pytest.raises(EndpointConnectionError):
        s3.get_object(Bucket=bucket, Key="k")
    server.restart()
    assert server.pid != pid
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"before the kill"
    s3.put_object(Bucket=bucket, Key="after", Body=b"1", IfNoneMatch="*")
