"""moto's standalone S3 server for the backup and restore script tests:
`S3` (an endpoint and a boto3 client), running_s3, the session's `s3`
fixture and a fresh `bucket` per test; the credentials and PATH of the AWS
CLI image."""
from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import sys
import tempfile
import urllib.request
import uuid
from pathlib import Path

import boto3
import pytest
from pyhelpers import ServerProcess, StartFailed, free_port  # tests/support

# The aws CLI and moto come from the interpreter running the tests, where
# requirements.txt installed them.
PY_BIN = str(Path(sys.executable).parent)


# S3 lists at most 1000 keys a page; moto is told to list 4, so every
# retention run below reads a listing of several pages, as a busy prefix does.
PAGE_SIZE = 4
SECRET_ACCESS_KEY = "moto-secret-key-not-for-logs"


# --------------------------------------------------------------------------
# S3 (moto's standalone server)


@dataclasses.dataclass
class S3:
    endpoint: str
    client: object

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        keys = []
        for page in self.client.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=prefix
        ):
            keys += [o["Key"] for o in page.get("Contents", [])]
        return sorted(keys)

    def put(self, bucket: str, key: str, body: bytes = b"old dump") -> None:
        self.client.put_object(Bucket=bucket, Key=key, Body=body)

    def get(self, bucket: str, key: str) -> bytes:
        return self.client.get_object(Bucket=bucket, Key=key)["Body"].read()


@contextlib.contextmanager
def running_s3(**env: str):
    """moto's standalone S3 server on loopback (env: its settings), with a
    client; stopped on exit."""
    port = free_port()
    log = tempfile.TemporaryFile()
    server = ServerProcess(
        "moto server",
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        log,
        env=dict(os.environ, MOTO_S3_DEFAULT_MAX_KEYS=str(PAGE_SIZE), **env),
        start_new_session=True,
    )
    endpoint = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2).read()
        return True

    try:
        try:
            server.wait_ready(answers, 60, 0.2)
        except StartFailed:
            log.seek(0)
            pytest.fail(f"moto server did not start: {log.read().decode()}")
        client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="moto",
            aws_secret_access_key=SECRET_ACCESS_KEY,
        )
        yield S3(endpoint, client)
    finally:
        server.stop(signal.SIGTERM, grace=10)  # with its process group
        log.close()


@pytest.fixture(scope="session")
def s3():
    with running_s3() as server:
        yield server


@pytest.fixture
def bucket(s3):
    name = f"opshooks-test-{uuid.uuid4().hex[:12]}"
    s3.client.create_bucket(Bucket=name)
    return name
