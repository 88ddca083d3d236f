"""The HTTP surface: API Gateway HTTP API (payload v2) events in, the public contract out.

* :mod:`leasefence.api.security` - scopes, the route table, the caller from the authorizer context
* :mod:`leasefence.api.models`   - pydantic request models and the response models (the OpenAPI
  schemas; those of the operation, claim and history derived from :mod:`leasefence.resources`)
* :mod:`leasefence.api.errors`   - the one place where exceptions become the contract's error JSON
* :mod:`leasefence.api.routes`   - the validated resolver and its routes
* :mod:`leasefence.api._console` - the operator console's routes (registered by the routes)
* :mod:`leasefence.api._shared`  - what the route handlers share (registration, answers, filters)
* :mod:`leasefence.api._docs`    - what the OpenAPI document says of each route (summary, answers)
* :mod:`leasefence.api.links`    - the document's links (enqueue and claim to the operation routes)
* :mod:`leasefence.api.app`      - :func:`~leasefence.api.app.handle`, the entry (imports the routes on first use)
* :mod:`leasefence.api.openapi`  - the OpenAPI document generated from the code

Importing this package imports none of them.
"""
