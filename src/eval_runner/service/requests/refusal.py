"""The one way admission says no: `RefusalError(code, message)`, answered at once as a refusal result.

Its own module so that the steps of planning (`admission`, `published`) can both raise it.
"""

from __future__ import annotations

from eval_runner.contracts.errors import Code
from eval_runner.errors import EvalRunnerError


class RefusalError(EvalRunnerError):
    """Refuse the request with `code` and `message` (answered at once; nothing was reserved)."""

    def __init__(self, code: Code, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
