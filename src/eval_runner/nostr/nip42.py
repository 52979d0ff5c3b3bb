"""NIP-42 relay authentication: the kind 22242 answer to `["AUTH", challenge]`.

The reference runner and trainer authenticate on every connection
(wire.md §2.2). The AUTH identity only authenticates the socket; it is never
the principal of a job. Time is passed in so this stays pure.
"""

from __future__ import annotations

from typing import Final

from eval_runner.nostr.event import Event, sign
from eval_runner.nostr.keys import SecretKey

AUTH_KIND: Final = 22_242


def auth_event(secret: SecretKey, relay_url: str, challenge: str, created_at: int) -> Event:
    """Sign the kind 22242 event carrying `["relay", url]` and `["challenge", challenge]`."""
    return sign(secret, AUTH_KIND, (("relay", relay_url), ("challenge", challenge)), "", created_at)
