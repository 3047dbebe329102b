"""The scale benchmark's source shapes: one topic of N partitions, or many topics of few (issue 18)."""

from __future__ import annotations

import re

import pytest

from bench.scale import Shape, scale_markdown


def test_a_number_is_one_topic_and_txp_is_many_topics() -> None:
    assert Shape.parse("2000") == Shape(1, 2000)
    assert Shape.parse(" 500x4 ") == Shape(500, 4)
    assert Shape.parse("500x4").partitions == Shape.parse("2000").partitions == 2000
    # One topic keeps the names older results and tools use.
    assert Shape(1, 8).names("scale8r0b") == ["scale8r0b"]
    assert Shape(1, 8).pattern("scale8r0b") == "scale8r0b"
    assert Shape(1, 8).label == "8" and Shape(500, 4).label == "500x4"


@pytest.mark.parametrize("text", ["x4", "500x", "ax4", "0x4", "500x0", "-1", "2x2x2"])
def test_a_size_that_is_neither_says_so(text: str) -> None:
    with pytest.raises(SystemExit, match="--scale-partitions"):
        Shape.parse(text)


def test_every_partition_once_the_topics_taking_turns() -> None:
    keys = Shape(3, 2).keys("t", "a.")
    assert keys == [("a.t-0000", 0), ("a.t-0001", 0), ("a.t-0002", 0),
                    ("a.t-0000", 1), ("a.t-0001", 1), ("a.t-0002", 1)]


def test_the_pattern_takes_the_runs_topics_and_no_other_runs() -> None:
    shape = Shape(500, 4)
    pattern = re.compile(shape.pattern("scale500x4r0b"))
    assert all(pattern.fullmatch(name) for name in shape.names("scale500x4r0b"))
    for other in ("scale500x4r0r-0001", "scale500x4r1b-0001", "scale500x4r0b", "scale500x4r0b-0001-x"):
        assert not pattern.fullmatch(other)


def test_the_table_keeps_one_topic_and_many_topics_apart() -> None:
    row = {"records_per_s": 100_000, "records": 1000, "system": "mirror_core batches", "records_per_batch": 72.5}
    data = {"memory": {"arrays_rss_bytes_per_run": 1, "lists_rss_bytes_per_run": 2, "runs": 3}, "history": [],
            "partitions": [row | {"partitions": 2000}, row | {"partitions": 2000, "topics": 500,
                                                             "records_per_s": 50_000}]}
    text = scale_markdown(data, {"date": "today"})
    assert "| mirror_core batches | 2,000 | 1,000 | 72.5 | 100,000 |" in text  # the source's batching, then the rate
    assert "| mirror_core batches | 500 x 4 | 1,000 | 72.5 | 50,000 |" in text
