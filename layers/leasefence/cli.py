"""The ``leasefence`` command line."""

from __future__ import annotations

import signal
import threading

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, help="leasefence: leases for liveness, fences for safety.")


def _wait_for_signal() -> None:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(0.5):
        pass


@app.command()
def local(
    host: str = typer.Option("127.0.0.1", help="Address for the HTTP API."),
    port: int = typer.Option(8765, help="Port for the HTTP API."),
    dynamodb_port: int = typer.Option(8766, "--dynamodb-port", help="Port for the embedded DynamoDB endpoint."),
    sweep_interval: float = typer.Option(60.0, "--sweep-interval", help="Seconds between sweeper runs."),
) -> None:
    """Run the whole service on this machine until SIGINT/SIGTERM."""
    from leasefence.local.embedded import EmbeddedAws

    aws = EmbeddedAws(host="127.0.0.1", port=dynamodb_port).start()
    spec = aws.create_tables()
    typer.echo(f"DynamoDB endpoint: {aws.endpoint}  (table {spec.table_name}, linearizable: one request at a time)")
    typer.echo("Press Ctrl-C to stop.")
    try:
        _wait_for_signal()
    finally:
        aws.stop()
    typer.echo("stopped")


def main() -> None:
    app()
