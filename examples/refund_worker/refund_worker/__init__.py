"""A class-B refund worker: see ``jobs``."""
