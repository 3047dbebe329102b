"""Records' schema ids in the Confluent wire format (a zero magic byte, then the schema id as 4 big-endian bytes,
then the payload), rewritten from the source registry's ids to the target's. A key or value that does not start
with the magic byte, or is shorter than the header, is not framed and passes unchanged; a framed one whose id the
map lacks is :class:`UnknownSchemaId` — never copied with an id that may mean another schema on the target."""

from __future__ import annotations

MAGIC = 0
HEADER = 5


class UnknownSchemaId(Exception):
    def __init__(self, schema_id: int) -> None:
        super().__init__(schema_id)
        self.schema_id = schema_id


def framed_id(data: bytes | None) -> int | None:
    """The schema id ``data`` is framed with, None when it is not framed."""
    if data is None or len(data) < HEADER or data[0] != MAGIC:
        return None
    return int.from_bytes(data[1:HEADER], "big")


def translate(data: bytes | None, ids: dict[int, int]) -> bytes | None:
    """``data`` with its schema id replaced by ``ids[id]`` (unchanged when not framed or the id is the same)."""
    source_id = framed_id(data)
    if source_id is None:
        return data
    target_id = ids.get(source_id)
    if target_id is None:
        raise UnknownSchemaId(source_id)
    assert data is not None
    if target_id == source_id:
        return data
    return b"\x00" + target_id.to_bytes(4, "big") + data[HEADER:]
