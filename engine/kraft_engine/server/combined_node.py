"""A combined node (`process.roles=broker,controller`): a controller and a broker in one process.

As in Kafka's combined mode, the broker half does not run a raft observer of its own: it follows
the controller's replica of `__cluster_metadata` (its loader is attached to the controller's raft
driver before the first poll). Each half serves its own listeners: the controller listener(s)
from `controller.listener.names`, the broker the others. The HTTP endpoint (`/metrics`, `/healthz`,
`/readyz`) is the controller's, with the broker's metrics on the same registry.

Shutdown order matters: SIGTERM first runs the broker's controlled shutdown (the controller
beside it must still be there to move leaderships away), then stops the controller. If the
controller stops on its own (a fatal fault), the broker halts at once and the process exits with
the controller's error.
"""

from __future__ import annotations

import asyncio
import contextlib

from kraft_engine.server.broker_node import BrokerNode
from kraft_engine.server.config import KafkaConfig
from kraft_engine.server.controller_node import ControllerNode

__all__ = ["CombinedNode"]


class CombinedNode:
    def __init__(self, controller: ControllerNode, broker: BrokerNode) -> None:
        self.controller = controller
        self.broker = broker

    @classmethod
    def open(cls, config: KafkaConfig, *, config_path: str | None = None) -> CombinedNode:
        controller = ControllerNode.open(config, config_path=config_path)
        return cls(controller, BrokerNode.open(config, shared=controller))

    def stop(self) -> None:
        """SIGTERM: the broker's controlled shutdown first; the controller follows (see `run`)."""
        self.broker.stop()

    async def run(self) -> None:
        self.broker.prepare()
        loop = asyncio.get_running_loop()
        controller = loop.create_task(self.controller.run())
        await asyncio.wait({controller, loop.create_task(self.controller.started.wait())},
                           return_when=asyncio.FIRST_COMPLETED)
        broker = loop.create_task(self.broker.run())
        done, _ = await asyncio.wait({controller, broker}, return_when=asyncio.FIRST_COMPLETED)
        if controller in done:
            self.broker.halt()
            with contextlib.suppress(Exception):
                await broker
            await controller  # raises the controller's error, if any
            return
        self.controller.stop()
        try:
            await broker
        finally:
            await controller
