"""One broker's handle on the cluster's metadata: the controller's image to read, changes to commit
(at the broker clock's time), and the changes to follow.

The stores of cluster-wide state a broker keeps in memory for its requests (the dynamic broker
configs, the group configs, the SCRAM credentials, the client quotas, the producer-id blocks) read
the image when the broker opens, commit their changes through `commit` (the controller writes them
to the metadata log before it returns: on an OSError nothing changed), and apply every change,
theirs or another broker's, from `subscribe`: what a change means is decided once, where it is
published, whichever broker asked for it. `close` drops the broker's subscriptions (a broker stopped
while the cluster runs follows nothing).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Sequence

if TYPE_CHECKING:
    from minibroker.clock import BrokerClock
    from minibroker.storage.controller import Controller
    from minibroker.storage.metadata_image import MetadataImage, MetadataRecord

Subscriber = Callable[["Sequence[MetadataRecord]"], None]

__all__ = ["BrokerMetadata"]


class BrokerMetadata:
    def __init__(self, controller: Controller, clock: BrokerClock, node_id: int) -> None:
        self.controller = controller
        self.clock = clock
        self.node_id = node_id
        self._subscriptions: list[Callable] = []

    @property
    def image(self) -> MetadataImage:
        return self.controller.image

    def commit(self, records: Sequence[MetadataRecord]) -> None:
        """Write `records` through the controller (durable on return) and publish them."""
        self.controller.commit(records, self.clock.now_ms())

    def subscribe(self, subscriber: Subscriber) -> None:
        """Call `subscriber(records)` after every change committed, until `close`."""
        def publisher(records, _now_ms, subscriber=subscriber):
            subscriber(records)

        self._subscriptions.append(publisher)
        self.controller.subscribe(publisher)

    def close(self) -> None:
        for publisher in self._subscriptions:
            self.controller.unsubscribe(publisher)
        self._subscriptions.clear()
