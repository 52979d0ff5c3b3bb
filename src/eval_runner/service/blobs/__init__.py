"""Blobs by digest: the Blossom client the runner fetches and uploads with, and the embedded Blossom server.

`client.BlobStore` reads `<base>/<sha256>` from its read bases in turn and uploads to one write base
(wire.md §19); `server.BlobServer` is the embedded default (`serve` starts it when no Blossom is
configured), over `files.BlobFiles`, a content-addressed directory. Failures are `errors.BlobError`.
"""

from eval_runner.service.blobs.client import AuthScheme, BlobStore, RetryPolicy, Upload, base_from_relay, sha256_hex
from eval_runner.service.blobs.errors import BlobCode, BlobError
from eval_runner.service.blobs.files import BlobFiles, StoredBlob
from eval_runner.service.blobs.server import MAX_BLOB_BYTES, BlobServer, BlobService, UsedAuthorizations

__all__ = [
    "MAX_BLOB_BYTES",
    "AuthScheme",
    "BlobCode",
    "BlobError",
    "BlobFiles",
    "BlobServer",
    "BlobService",
    "BlobStore",
    "RetryPolicy",
    "StoredBlob",
    "Upload",
    "UsedAuthorizations",
    "base_from_relay",
    "sha256_hex",
]
