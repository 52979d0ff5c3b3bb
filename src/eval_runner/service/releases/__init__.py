"""Releases: a test set or a catalog tool as a signed NIP-EXT `3184` whose files are in the blob store
(suites, tools, publish), and a published release back into a test set on disk (materialize).
"""

from eval_runner.service.releases.publish import Released, ReleaseError, ReleaseFile, ReleaseRelay, upload_and_release
from eval_runner.service.releases.suites import SUITE_COMPONENT, SuiteRelease, release_suite, suite_release

__all__ = [
    "SUITE_COMPONENT",
    "ReleaseError",
    "ReleaseFile",
    "ReleaseRelay",
    "Released",
    "SuiteRelease",
    "release_suite",
    "suite_release",
    "upload_and_release",
]
