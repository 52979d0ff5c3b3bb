"""The bucket store: reads through the bucket's public base (here the embedded server over the directory the
stand-in `gcloud` writes), writes with `gcloud storage cp` (here the stand-in, since GCS is outside our
control), skips what the read side has, and turns a refusing or missing `gcloud` into a typed error."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from eval_runner.service.blobs import BlobError, BlobServer, BlobStore
from eval_runner.service.blobs.bucket import BucketStore
from eval_runner.stand_ins import GCLOUD

BLOB = b"a case prompt\n"


def gcloud_wrapper(tmp_path: Path) -> str:
    """The stand-in as an executable named like the real one, run by this interpreter."""
    wrapper = tmp_path / "bin" / "gcloud"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {GCLOUD} "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def gcloud_config(tmp_path: Path, bucket_dir: Path) -> Path:
    config = tmp_path / "gcloud-config"
    config.mkdir()
    (config / "stand-in-bucket").write_text(str(bucket_dir))
    return config


async def test_an_upload_lands_in_the_bucket_and_reads_back_through_its_base(
    tmp_path: Path, blob_server: BlobServer, blob_root: Path
) -> None:
    config = gcloud_config(tmp_path, blob_root)
    async with BlobStore([blob_server.url]) as reads:
        bucket = BucketStore(reads, "gs://eval-blobs", config, gcloud=gcloud_wrapper(tmp_path))
        first = await bucket.upload(BLOB, "text/markdown")
        assert (first.outcome, first.sha256) == ("created", hashlib.sha256(BLOB).hexdigest())
        assert await bucket.fetch(first.sha256) == BLOB
        assert blob_server.files.find(first.sha256) is not None
        again = await bucket.upload(BLOB, "text/markdown")
        assert again.outcome == "present"


async def test_a_refusing_bucket_is_refused_with_gclouds_last_line(
    tmp_path: Path, blob_server: BlobServer, blob_root: Path
) -> None:
    config = gcloud_config(tmp_path, blob_root)
    (config / "stand-in-refuse").write_text("AccessDeniedException: 403 no storage.objects.create\n")
    async with BlobStore([blob_server.url]) as reads:
        bucket = BucketStore(reads, "gs://eval-blobs", config, gcloud=gcloud_wrapper(tmp_path))
        with pytest.raises(BlobError) as raised:
            await bucket.upload(BLOB, "text/markdown")
    assert raised.value.code == "refused"
    assert str(raised.value) == (
        f"the bucket refused {hashlib.sha256(BLOB).hexdigest()}: 'AccessDeniedException: 403 no storage.objects.create'"
    )
    assert list(blob_root.glob("??/*")) == []


async def test_no_gcloud_is_unavailable_and_leaves_no_temp_file(tmp_path: Path, blob_server: BlobServer) -> None:
    temp = tmp_path / "temp"
    temp.mkdir()
    async with BlobStore([blob_server.url]) as reads:
        bucket = BucketStore(reads, "gs://eval-blobs", tmp_path, gcloud=str(tmp_path / "no-gcloud"), temp_root=temp)
        with pytest.raises(BlobError) as raised:
            await bucket.upload(BLOB, "text/markdown")
    assert raised.value.code == "unavailable"
    assert list(temp.iterdir()) == []
