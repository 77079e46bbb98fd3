"""The HTTP layer: endpoints, the /v1/verify fast path, auth dependencies, body and access middleware, and
the per-app context they share. Nothing below this package imports it."""
