"""Binding a listening socket, for the Kafka listeners (minibroker.server) and GET /metrics
(minibroker.metrics_http) alike."""

from __future__ import annotations

import trio

from minibroker.errors import StartupError

__all__ = ["bind"]


async def bind(host: str, port: int, what: str) -> list[trio.SocketListener]:
    """open_tcp_listeners, with Kafka's message naming the address when it cannot bind."""
    try:
        return await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise StartupError(f"Socket server failed to bind to {host}:{port} ({what}): {reason}.") from exc
