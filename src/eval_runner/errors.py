"""The root of every error eval-runner raises that is not a wire error.

Wire errors keep their own roots, because their codes are the wire's: `contracts.errors.ContractError`
(code, field path, message) and `nostr.errors.NostrError`. Everything else (a test set that does not
load, a run that cannot start, a ledger that cannot be written, a relay that went away) derives from
`EvalRunnerError`, so a caller can catch what is ours without catching Python's own.
"""


class EvalRunnerError(Exception):
    """Something eval-runner could not do; `str()` is the message a person reads."""


class CodedError(EvalRunnerError):
    """An error a caller branches on by `code` (a short word its raiser documents); `str()` is the message."""

    code: str
    message: str

    def __init__(self, code: str, message: str) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code!r}, {self.message!r})"
