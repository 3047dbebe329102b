from pathlib import Path

from mirror_core.config.reference import render_reference


def test_configuration_reference_is_current() -> None:
    path = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
    assert path.read_text() == render_reference(), (
        "docs/configuration.md is stale: run `python -m mirror_core.config.reference > docs/configuration.md`")
