"""Runs every tests/transcripts/*.txt: each directive's output must match the expectation below it.

Set KRAFT_REWRITE=1 to regenerate the expectations from the current behaviour (then read the
diff: a rewrite is a claim that the new protocol trace is right).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kraft_engine.sim.datadriven import TranscriptStep, parse_transcript, render_transcript
from kraft_engine.sim.transcript import TranscriptRunner

HERE = Path(__file__).parent
TRANSCRIPTS = sorted(HERE.glob("*.txt"))
REWRITE = os.environ.get("KRAFT_REWRITE") == "1"


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=[p.stem for p in TRANSCRIPTS])
def test_transcript(path: Path) -> None:
    steps, trailing = parse_transcript(path.read_text(), name=path.name)
    runner = TranscriptRunner()
    actual: dict[int, str] = {}
    for step in steps:
        actual[step.line] = runner.run(step.directive)
        if not REWRITE:
            assert actual[step.line] == step.expected, (
                f"{path.name}:{step.line}: {step.directive}\n"
                f"--- expected\n{step.expected}\n--- actual\n{actual[step.line]}\n"
                "(KRAFT_REWRITE=1 regenerates expectations)"
            )
    if REWRITE:

        def output_for(step: TranscriptStep) -> str:
            return actual[step.line]

        path.write_text(render_transcript(steps, trailing, output_for=output_for))


def test_there_are_transcripts() -> None:
    assert len(TRANSCRIPTS) >= 5
