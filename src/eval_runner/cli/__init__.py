"""The commands: one module per command group, and what they show."""

from eval_runner.cli.main import main

__all__ = ["main"]
