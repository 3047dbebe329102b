"""The hot path calls ``Producer.produce`` positionally (keyword parsing was ~40 % of each call). The
slot order is confluent-kafka's C signature, not its docstring: this pins it against the installed
version, so an upgrade that moves a slot fails here instead of mis-stamping copied records."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, Message, Producer


def _producer() -> Producer:
    # Nothing listens on port 1: the record waits in the local queue until message.timeout.ms.
    return Producer({"bootstrap.servers": "127.0.0.1:1", "message.timeout.ms": 200, "log_level": 0})


def test_positional_slots_reach_the_delivery_report() -> None:
    reports: list[tuple[KafkaError | None, Message]] = []
    p = _producer()
    p.produce("slots", b"value", b"key", 3, lambda err, msg: reports.append((err, msg)), None,
              1_700_000_000_123, [("h", b"x")])
    for _ in range(100):
        if reports:
            break
        p.poll(0.1)
    assert len(reports) == 1, "the callback slot (5th) was not the delivery callback"
    err, msg = reports[0]
    assert err is not None and err.code() == KafkaError._MSG_TIMED_OUT
    assert (msg.topic(), msg.value(), msg.key(), msg.partition()) == ("slots", b"value", b"key", 3)



def test_the_seventh_slot_is_an_integer_and_the_last_is_headers() -> None:
    p = _producer()
    with pytest.raises(TypeError, match="integer"):
        p.produce("slots", b"v", None, 0, None, None, "not a timestamp", None)
    with pytest.raises(TypeError, match="headers"):
        p.produce("slots", b"v", None, 0, None, None, 0, 123)
    p.produce("slots", b"v", None, 0, None, None, 0, None)  # None: no headers
    p.produce("slots", b"v", None, 0, None, None, 0, [("h", b"x")])
    p.purge()
