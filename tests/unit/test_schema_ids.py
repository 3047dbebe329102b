"""The Confluent wire format's schema id rewritten, unframed data untouched, an unknown id refused."""

from __future__ import annotations

import pytest

from mirror_core.schemas.ids import UnknownSchemaId, framed_id, translate


def test_framed_id_translated_payload_kept() -> None:
    record = b"\x00\x00\x00\x00\x07" + b"avro-bytes"
    out = translate(record, {7: 300})
    assert out == b"\x00\x00\x00\x01\x2c" + b"avro-bytes"
    assert framed_id(out) == 300


def test_unframed_and_none_pass_unchanged() -> None:
    for data in (None, b"", b"\x00\x01", b"plain text", b"\x01\x00\x00\x00\x07rest"):
        assert translate(data, {}) == data


def test_unknown_id_refused() -> None:
    with pytest.raises(UnknownSchemaId) as unknown:
        translate(b"\x00\x00\x00\x00\x09x", {7: 300})
    assert unknown.value.schema_id == 9
