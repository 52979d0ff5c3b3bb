"""The command line's one argparse tree: the parser class every command's parser is, and how help names
defaults and environment variables.

Every usage error exits 64 (EX_USAGE, runner.md §3) with the usage and the error on stderr, and a word
no command takes is an error of the (sub)command that met it. An option read from the environment when
it is not given says `[env: NAME=default]` (the way uv does); one with a fixed default `[default: X]`.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, NoReturn, TypeAlias, TypeVar, overload

from eval_runner.errors import EvalRunnerError

USAGE: Final = 64

Commands: TypeAlias = "argparse._SubParsersAction[Parser]"
Handler = Callable[[argparse.Namespace], int]
_N = TypeVar("_N")


class UsageError(EvalRunnerError):
    """What the command line asks cannot be done as asked (exit 64); `str()` says why, in one line."""


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, except that text written in lines (the environment tables) keeps its lines and
    lines never break at a hyphen (`./eval-results`, `--door-url` stay whole)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return textwrap.fill(
            " ".join(text.split()),
            width,
            initial_indent=indent,
            subsequent_indent=indent,
            break_on_hyphens=False,
            break_long_words=False,
        )

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False, break_long_words=False)


class Parser(argparse.ArgumentParser):
    """A parser whose errors exit 64 and whose leftover words are its own error, never the top level's
    (argparse hands them up to `eval-runner` otherwise) and never ignored. Options are never abbreviated."""

    def __init__(self, *args: Any, **options: Any) -> None:
        options.setdefault("allow_abbrev", False)
        options.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **options)

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(USAGE, f"{self.prog}: error: {message}\n")

    @overload
    def parse_known_args(
        self, args: Iterable[str] | None = None, namespace: None = None
    ) -> tuple[argparse.Namespace, list[str]]: ...
    @overload
    def parse_known_args(self, args: Iterable[str] | None, namespace: _N) -> tuple[_N, list[str]]: ...
    @overload
    def parse_known_args(self, *, namespace: _N) -> tuple[_N, list[str]]: ...
    def parse_known_args(self, args: Iterable[str] | None = None, namespace: object = None) -> tuple[object, list[str]]:
        parsed, extra = super().parse_known_args(args, namespace)
        if extra:
            self.error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed, extra

    def add_commands(self, title: str, metavar: str) -> Commands:
        """The subcommands below this parser; each sets `handler`. Without one, this parser's help goes to
        stderr and the exit is 64, as for `eval-runner` alone (runner.md §3)."""
        self.set_defaults(handler=self.usage_error_handler)
        return self.add_subparsers(title=title, metavar=metavar)

    def usage_error_handler(self, _: argparse.Namespace) -> int:
        self.print_help(sys.stderr)
        return USAGE


def env_default(name: str, default: str) -> str:
    """`[env: NAME=default]`: the option falls back to `$NAME`, then to `default`."""
    return f"[env: {name}={default}]"


def fixed_default(default: object) -> str:
    return f"[default: {default}]"


@dataclass(frozen=True, slots=True)
class Variable:
    """An environment variable a command reads: its name, its default in words, and what it is for."""

    name: str
    default: str
    meaning: str


#: The widest `NAME=default` beside its meaning; a wider one has its meaning on the next line.
COLUMN: Final = 44


def environment(variables: Sequence[Variable], heading: str = "environment (NAME=default when unset)") -> str:
    """The epilog naming each variable as `NAME=default  meaning`, one a line."""
    cells = [f"{variable.name}={variable.default}" for variable in variables]
    width = min(max(len(cell) for cell in cells), COLUMN)
    lines = []
    for cell, variable in zip(cells, variables, strict=True):
        if len(cell) > width:
            lines += [f"  {cell}", f"  {'':{width}}  {variable.meaning}"]
        else:
            lines.append(f"  {cell.ljust(width)}  {variable.meaning}")
    return heading + ":\n" + "\n".join(lines) + "\n"


def bounded(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number from `low` to `high`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}")
        return value

    return parse
