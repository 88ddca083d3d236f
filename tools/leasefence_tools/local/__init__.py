"""The service on one machine: embedded AWS endpoints and the HTTP API over the handlers."""

#: The listen backlog of the local stack's sockets (the HTTP API and the embedded AWS endpoint):
#: connections the kernel completes and queues before the server accepts them. Python's
#: ``socketserver`` default is 5, so a burst of workers connecting at once (16 or more) had
#: connections dropped or reset; 1024 is waitress's own default, and Linux caps it at
#: ``net.core.somaxconn`` (4096 on current kernels).
LISTEN_BACKLOG = 1024

#: The API function's execution environments under ``leasefence local`` (processes, started as
#: concurrent requests need them): a lifecycle's three calls hold an environment about 40 ms, so
#: one capped 16 workers near 24 lifecycles a second; two lift that bound to about 50, above what
#: the stack's own process serves, and more added CPU without rate on a 2-core machine
#: (docs/local-stack.md).
API_ENVIRONMENTS = 2
