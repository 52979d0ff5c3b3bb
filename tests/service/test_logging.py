"""One logging path: the service's modules log through `eval_runner.*` loggers, a line is the message alone,
the command line installs the one handler (stderr) for as long as a command runs (`tests/service/test_serve.py`
reads those lines from the real process), and no part takes a `log` callable."""

from __future__ import annotations

import importlib
import inspect
import io
import logging
import pkgutil

import pytest

import eval_runner.service
from eval_runner.logs import ROOT, MessageOnly, lines_to, lines_to_stream
from eval_runner.service.relay.liveness import RelayListener
from eval_runner.service.relay.publisher import Publisher
from eval_runner.service.requests.admission import Admission
from eval_runner.service.requests.pipeline import Pipeline
from eval_runner.service.requests.quota import Quota
from eval_runner.service.requests.reply import Answers
from eval_runner.service.serve import serve

SERVICE_MODULES = [
    importlib.import_module(found.name)
    for found in pkgutil.walk_packages(eval_runner.service.__path__, prefix="eval_runner.service.")
]


@pytest.mark.parametrize("module", SERVICE_MODULES, ids=lambda module: module.__name__)
def test_every_logger_of_the_service_is_under_the_one_root(module: object) -> None:
    found = getattr(module, "logger", None)
    if found is not None:
        assert isinstance(found, logging.Logger)
        assert found.name == getattr(module, "__name__", None)
        assert found.name.startswith(f"{ROOT}.")


@pytest.mark.parametrize("part", [Pipeline, Admission, Quota, Answers, Publisher, RelayListener, serve])
def test_no_part_takes_a_log_callable(part: object) -> None:
    assert callable(part)
    assert "log" not in inspect.signature(part).parameters


def test_a_line_is_the_message_alone_and_goes_where_the_runner_sends_it() -> None:
    record = logging.LogRecord("eval_runner.x", logging.WARNING, "f.py", 1, "quota: %s: %s", ("/q", "why"), None)
    assert MessageOnly().format(record) == "quota: /q: why"
    stream = io.StringIO()
    logger = logging.getLogger("eval_runner.service.example")
    before = logging.getLogger(ROOT).level
    with lines_to_stream(stream):
        logger.info("subscribed; requests arrive live from here")
        logger.warning("relay: %s; reconnecting in %d s", "gone", 2)
        logger.debug("not a line")
    logger.info("after the runner stopped logging here")
    assert stream.getvalue() == "subscribed; requests arrive live from here\nrelay: gone; reconnecting in 2 s\n"
    assert logging.getLogger(ROOT).level == before
    assert not [handler for handler in logging.getLogger(ROOT).handlers if handler.formatter.__class__ is MessageOnly]


def test_lines_can_go_to_any_callable_while_inside() -> None:
    said: list[str] = []
    with lines_to(said.append):
        logging.getLogger("eval_runner.service.requests.pipeline").info("cancelling %s", "ab" * 16)
    assert said == [f"cancelling {'ab' * 16}"]
