from mirror_core.config.properties import parse_properties


def as_dict(text: str) -> dict[str, tuple[str, int]]:
    return {p.key: (p.value, p.line) for p in parse_properties(text)}


def test_separators_comments_and_line_numbers() -> None:
    text = "# comment\n! also comment\n\na = 1\nb:2\nc 3\n  d  =  spaced value  \ne=\n"
    assert as_dict(text) == {"a": ("1", 4), "b": ("2", 5), "c": ("3", 6), "d": ("spaced value", 7), "e": ("", 8)}


def test_continuation_and_escapes() -> None:
    text = "topics = orders, \\\n    payments, \\\n    refunds\nsep = \\t|\\u0041\nkey\\=with\\:seps = v\n"
    d = as_dict(text)
    assert d["topics"] == ("orders, payments, refunds", 1)
    assert d["sep"] == ("\t|A", 4)
    assert d["key=with:seps"] == ("v", 5)


def test_regex_backslashes_survive_as_in_java() -> None:
    # Java properties turn "\\." into "\." — what MM2 users write for a literal dot in a regex.
    assert as_dict("topics = demo\\\\..*\n")["topics"][0] == "demo\\..*"


def test_last_duplicate_kept_in_order() -> None:
    props = parse_properties("a=1\na=2\n")
    assert [(p.value, p.line) for p in props] == [("1", 1), ("2", 2)]
