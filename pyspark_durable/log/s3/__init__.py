"""The S3 log: a WAL in a bucket, ordered by conditional writes alone.

:mod:`.client` (options, credentials, retries, typed errors, the precondition probe),
:mod:`.log` (one log: entry objects created at boundaries with ``If-None-Match``) and
:mod:`.store` (the namespace's logs and snapshots). Needs boto3 (the ``s3`` extra).
"""
