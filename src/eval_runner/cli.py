"""The `eval-runner` command line. Thin: parsing and printing only; the work lives in the packages."""

from __future__ import annotations

import argparse
import sys

from eval_runner import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="eval-runner",
        description=(
            "The hosted eval runner: takes signed, encrypted job requests over a Nostr relay, runs an "
            "extension's test set with and without the extension in a sandbox, and answers with a verdict."
        ),
    )
    parser.add_argument("--version", action="version", version=f"eval-runner {__version__}")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    parser.parse_args(argv)
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
