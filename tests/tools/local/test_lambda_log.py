"""The local stack's Lambda log: what a handler's thread writes (Powertools' JSON lines, EMF
metric lines, its own prints) goes to a rotated, bounded file; every other thread's output stays
in the terminal; closing gives the output back."""

from __future__ import annotations

import logging
import sys
import threading

import pytest

from leasefence.observability import logger, metrics
from leasefence_tools.local.lambda_log import FILE, LambdaLog, invocation


@pytest.fixture
def info_level():
    """The Logger at INFO here, whatever level a test run before in this process left it at."""
    named = logging.getLogger(logger.name)
    before = named.level
    named.setLevel(logging.INFO)
    yield
    named.setLevel(before)


def test_a_handlers_output_goes_to_the_file_and_other_threads_keep_the_terminal(
    tmp_path, capsys, info_level
):
    path = tmp_path / FILE
    terminal, logger_stream = sys.stdout, logger.logger_handler.stream
    with LambdaLog(path):
        with invocation():
            logger.info("from the handler")
            metrics.add_metric(name="Probe", unit="Count", value=1)
            metrics.flush_metrics()
            print("a handler's print")
            print("to stderr", file=sys.stderr)

        def elsewhere() -> None:
            print("the stack's own line")
            logger.warning("a worker thread's record")  # not in a handler, still the Lambda's

        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join()
    assert sys.stdout is terminal and logger.logger_handler.stream is logger_stream  # given back
    lines = path.read_text().splitlines()
    assert any('"message":"from the handler"' in line for line in lines)
    assert any('"_aws"' in line and '"Probe"' in line for line in lines)  # the EMF line
    assert "a handler's print" in lines and "to stderr" in lines
    assert any('"message":"a worker thread\'s record"' in line for line in lines)
    shown = capsys.readouterr()
    assert shown.out == "the stack's own line\n" and shown.err == ""
    logger.info("after the close")
    assert "after the close" not in path.read_text()


def test_the_file_rotates_and_stays_within_its_bound(tmp_path):
    path = tmp_path / FILE
    log = LambdaLog(path, max_bytes=4_000, backups=1)
    assert log.bound_bytes == 8_000
    with log, invocation():
        for n in range(400):
            print(f"line {n:04d} " + "x" * 40)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == [FILE, f"{FILE}.1"]
    assert all((tmp_path / name).stat().st_size <= 4_000 for name in files)
    assert path.read_text().splitlines()[-1].startswith("line 0399 ")  # the newest kept


def test_echo_shows_the_lines_in_the_terminal_too(tmp_path, capsys):
    with LambdaLog(tmp_path / FILE, echo=True), invocation():
        print("shown and kept")
    assert capsys.readouterr().out == "shown and kept\n"
    assert (tmp_path / FILE).read_text() == "shown and kept\n"
