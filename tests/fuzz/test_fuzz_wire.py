"""A bounded run of the coverage-guided fuzz target (tests/fuzz/fuzz_wire.py) in the test suite: a few thousand
inputs grown from the seed corpus, in a subprocess (libFuzzer exits the process on a crash). The nightly-length
run is in docs/fuzzing.md."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("atheris", reason="atheris is in the dev extra (pip install -e '.[dev]')")

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
RUNS = 50_000


def test_the_wire_fuzz_target_finds_no_crash_in_a_bounded_run(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"  # grown here: the seeds in the repository stay as they are
    corpus.mkdir()
    for seed in (HERE / "corpus").iterdir():
        (corpus / seed.name).write_bytes(seed.read_bytes())
    run = subprocess.run(
        [sys.executable, str(HERE / "fuzz_wire.py"), str(corpus), f"-runs={RUNS}", "-max_len=4096",
         "-max_total_time=60", "-rss_limit_mb=1024", "-seed=1", f"-artifact_prefix={tmp_path}/"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300)
    tail = "\n".join(run.stderr.splitlines()[-40:])
    crashes = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(("crash-", "oom-", "timeout-")))
    assert run.returncode == 0 and not crashes, f"the fuzzer found {crashes or 'a failure'}:\n{tail}"
    assert "Done " in run.stderr, tail
