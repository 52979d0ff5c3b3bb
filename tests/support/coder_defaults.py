"""An operator's adoption for tests, built as `microcoder xp adopt` builds it (`xp_ledger::adopt`): an
`openagents.eval-admission.v1` decision admitting one tool's release, the next `coder-defaults` manifest
depending on that release and citing the decision, the signed `3184` pinning the manifest, and NIP-94
locators saying where a document can be fetched. Written as plain JSON (JCS), so a test can also write
what the reader must refuse.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from eval_runner.contracts.coder_defaults import ADMISSION_SCHEMA, LOCATOR_KIND, package_of
from eval_runner.contracts.package import PACKAGE_SCHEMA, RELEASE_KIND, RELEASE_MARKER
from eval_runner.contracts.strict_json import JsonValue, canonical
from eval_runner.nostr import Event, SecretKey, sign

POLICY = b"An operator adopts a tool after three confirming checks and one validation.\n"
SCOPE = b'{"tasks":"coding"}'
#: A year, as the reference's content-addressed admissions last.
YEAR = 365 * 86400


def artifact(data: bytes, media_type: str = "application/json", schema: str | None = None) -> dict[str, JsonValue]:
    out: dict[str, JsonValue] = {
        "digest": "sha256:" + hashlib.sha256(data).hexdigest(),
        "size": len(data),
        "media_type": media_type,
    }
    if schema is not None:
        out["schema"] = schema
    return out


def admission_value(
    root: str, subject: dict[str, JsonValue], *, expires_at: int, decision: str = "admit"
) -> dict[str, Any]:
    """An admission of `subject` (a DefinitionRef naming its release in `event`) by `root`."""
    report = artifact(b'{"report":1}', schema="openagents.eval-report.v1")
    validation = artifact(b'{"report":2}', schema="openagents.eval-report.v1")
    return {
        "v": ADMISSION_SCHEMA,
        "requires": [],
        "subject": subject,
        "reports": [report],
        "validation": [validation],
        "policy": {"id": f"{root}:coder-defaults/policy", "artifact": artifact(POLICY, "text/markdown")},
        "scope": artifact(SCOPE),
        "decision": decision,
        "issuer": root,
        "expires_at": expires_at,
    }


def manifest_value(root: str, version: str, dependencies: list[str], receipts: list[JsonValue]) -> dict[str, Any]:
    return {
        "v": PACKAGE_SCHEMA,
        "requires": [],
        "package": package_of(root),
        "version": version,
        "license": "CC0-1.0",
        "provenance": {
            "source": "local",
            "receipts": receipts,
            "unknowns": ["An admission records an operator's decision; it is not a security review."],
        },
        "components": [],
        "files": [],
        "dependencies": dependencies,
    }


def release_event(secret: SecretKey, manifest: bytes, *, version: str, created_at: int) -> Event:
    """The `3184` pinning `manifest`, signed by the defaults root."""
    body = {
        "v": 1,
        "requires": [],
        "type": "release",
        "package": package_of(secret.public_key().to_hex()),
        "version": version,
        "manifest": artifact(manifest, schema=PACKAGE_SCHEMA),
    }
    return sign(secret, RELEASE_KIND, [["t", RELEASE_MARKER]], canonical(body).decode(), created_at)


def locator_event(secret: SecretKey, data: bytes, url: str, created_at: int) -> Event:
    """A NIP-94 locator of `data` at `url`."""
    tags = [
        ["url", url],
        ["x", hashlib.sha256(data).hexdigest()],
        ["m", "application/json"],
        ["size", str(len(data))],
    ]
    return sign(secret, LOCATOR_KIND, tags, "A coder-defaults document, pinned by its digest.", created_at)


@dataclass(frozen=True)
class Adoption:
    """One adoption: the admission's and manifest's bytes and the signed release."""

    admission: bytes
    manifest: bytes
    release: Event

    @property
    def documents(self) -> tuple[bytes, bytes]:
        return (self.manifest, self.admission)


def adoption(
    secret: SecretKey,
    subject: dict[str, JsonValue],
    *,
    now: int,
    version: str = "1",
    expires_at: int | None = None,
    decision: str = "admit",
) -> Adoption:
    """The operator `secret` adopts `subject` (whose `event` is the tool's release) as of `now`."""
    root = secret.public_key().to_hex()
    admission = canonical(
        admission_value(root, subject, expires_at=now + YEAR if expires_at is None else expires_at, decision=decision)
    )
    event = subject["event"]
    assert isinstance(event, dict)
    receipt = artifact(admission, schema=ADMISSION_SCHEMA)
    manifest = canonical(manifest_value(root, version, [str(event["id"])], [receipt]))
    return Adoption(admission, manifest, release_event(secret, manifest, version=version, created_at=now))
