"""Pure Nostr primitives for the eval runner: keys, NIP-01 events, NIP-44 v2, NIP-42, NIP-98, relay frames.

Nothing here opens a socket, reads a file or a clock: functions that need the
time take it as a parameter, so the runner's I/O layers stay in charge of
both. Every failure is a typed `NostrError` subclass with (code, path, message).
"""

from eval_runner.nostr.errors import (
    EventError,
    FrameError,
    KeyFormatError,
    Nip44Error,
    Nip98Error,
    NostrError,
)
from eval_runner.nostr.event import Event, compute_id, first_tag_value, sign, tag_values
from eval_runner.nostr.frames import (
    AuthChallenge,
    AuthResponse,
    ClientEvent,
    ClientFrame,
    Close,
    Closed,
    Eose,
    Filter,
    Notice,
    Ok,
    RelayEvent,
    RelayFrame,
    Req,
    encode,
    parse_client_frame,
    parse_relay_frame,
)
from eval_runner.nostr.keys import PublicKey, SecretKey
from eval_runner.nostr.nip42 import auth_event
from eval_runner.nostr.nip44 import ConversationKeys, conversation_key, decrypt, encrypt
from eval_runner.nostr.nip98 import (
    VerifiedAuthorization,
    authorization_event,
    authorization_header,
    verify_authorization,
)

__all__ = [
    "AuthChallenge",
    "AuthResponse",
    "ClientEvent",
    "ClientFrame",
    "Close",
    "Closed",
    "ConversationKeys",
    "Eose",
    "Event",
    "EventError",
    "Filter",
    "FrameError",
    "KeyFormatError",
    "Nip44Error",
    "Nip98Error",
    "NostrError",
    "Notice",
    "Ok",
    "PublicKey",
    "RelayEvent",
    "RelayFrame",
    "Req",
    "SecretKey",
    "VerifiedAuthorization",
    "auth_event",
    "authorization_event",
    "authorization_header",
    "compute_id",
    "conversation_key",
    "decrypt",
    "encode",
    "encrypt",
    "first_tag_value",
    "parse_client_frame",
    "parse_relay_frame",
    "sign",
    "tag_values",
    "verify_authorization",
]
