"""The service on one machine: embedded AWS endpoints and (soon) the HTTP API over the handlers."""
