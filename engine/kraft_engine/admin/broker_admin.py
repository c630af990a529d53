"""An admin client that talks to brokers (`--bootstrap-server`), as Kafka's Admin does by default.

A broker forwards the controller's admin requests (CreateTopics, DeleteTopics, CreatePartitions,
...) to the active controller itself and answers Metadata from its own image, so the client
needs no controller discovery: every request goes to any reachable bootstrap broker, retried
across brokers until the timeout like the controller client's.
"""

from __future__ import annotations

from typing import Any

from kraft_engine.admin.controller_admin import ControllerAdmin

__all__ = ["BrokerAdmin"]


class BrokerAdmin(ControllerAdmin):
    async def send_to_active(self, request: Any) -> Any:
        """Brokers forward the controller's requests: any broker takes them."""
        return await self.send_to_any(request)

    async def send_to(self, address: tuple[str, int], request: Any) -> Any | None:
        """One exchange with one broker (DescribeLogDirs describes the broker it is sent to);
        None when it cannot be reached."""
        return await self._send(address, request)
