"""What a flow reads its source through, on either data path: the group's librdkafka consumer (records), or
wire_reader.WireReader (batches: the consumer keeps the group, the wire fetcher reads). Acks, assignment, commit,
controls and reporting are written once against this protocol, and mypy sees every call they make."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from confluent_kafka import Consumer, Message, TopicPartition

#: a rebalance callback: librdkafka calls it with the group's own consumer
Rebalance = Callable[[Consumer, list[TopicPartition]], None]


class SourceReader(Protocol):
    """The calls the flow makes of its source reader (confluent_kafka.Consumer's signatures)."""

    def subscribe(self, topics: list[str], on_assign: Rebalance | None = None,
                  on_revoke: Rebalance | None = None, on_lost: Rebalance | None = None) -> None: ...

    def unsubscribe(self) -> None: ...

    def poll(self, timeout: float = -1) -> Message | None: ...

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]: ...

    def incremental_assign(self, partitions: list[TopicPartition]) -> None: ...

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None: ...

    def pause(self, partitions: list[TopicPartition]) -> None: ...

    def resume(self, partitions: list[TopicPartition]) -> None: ...

    def seek(self, partition: TopicPartition) -> None: ...

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]: ...

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float = -1,
                              cached: bool = False) -> tuple[int, int]: ...

    def memberid(self) -> str: ...

    def close(self) -> None: ...
