"""Reading and rewriting transcript files in the etcd "datadriven" layout.

A transcript is a sequence of steps. Each step is a directive line (`campaign 1`,
`deliver drop=2`), a `----` separator and the output the step must produce, ended by a blank
line. Output that itself contains blank lines is fenced by a doubled separator (`----` twice
before it and twice after it). Lines starting with `#` between steps are comments and survive a
rewrite untouched, so regenerating expectations never loses the prose that explains them.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field

from kraft_engine.errors import SimulationError

__all__ = ["Directive", "TranscriptError", "TranscriptStep", "parse_transcript", "render_transcript"]

_SEPARATOR = "----"


class TranscriptError(SimulationError, ValueError):
    """A transcript that cannot be parsed, or a directive that cannot be run; names file and line."""


@dataclass(frozen=True)
class Directive:
    """`command pos1 pos2 key=value ...`, parsed with shell quoting rules."""

    command: str
    args: tuple[str, ...] = ()
    options: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, line: str) -> Directive:
        words = shlex.split(line)
        if not words:
            raise ValueError("empty directive")
        args: list[str] = []
        options: dict[str, str] = {}
        for word in words[1:]:
            key, sep, value = word.partition("=")
            if sep:
                options[key] = value
            else:
                args.append(word)
        return cls(words[0], tuple(args), options)


@dataclass
class TranscriptStep:
    """One step: leading comment lines, the directive text, and its expected output."""

    comments: list[str]
    directive: str
    line: int
    expected: str


def parse_transcript(text: str, *, name: str = "<transcript>") -> tuple[list[TranscriptStep], list[str]]:
    """Return the steps and any trailing comment lines after the last step."""
    lines = text.split("\n")
    steps: list[TranscriptStep] = []
    comments: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#") or not line.strip():
            comments.append(line)
            i += 1
            continue
        directive_line = i + 1
        directive = line.strip()
        i += 1
        if i >= len(lines) or lines[i] != _SEPARATOR:
            raise TranscriptError(f"{name}:{directive_line}: expected '{_SEPARATOR}' after '{directive}'")
        i += 1
        output: list[str] = []
        if i < len(lines) and lines[i] == _SEPARATOR:
            # Fenced output: runs until a doubled separator.
            i += 1
            while True:
                if i + 1 >= len(lines):
                    raise TranscriptError(f"{name}:{directive_line}: unterminated fenced output")
                if lines[i] == _SEPARATOR and lines[i + 1] == _SEPARATOR:
                    i += 2
                    break
                output.append(lines[i])
                i += 1
        else:
            while i < len(lines) and lines[i].strip():
                output.append(lines[i])
                i += 1
        # Blank lines before the directive belong to layout, not to the comment block.
        while comments and not comments[0].strip():
            comments.pop(0)
        steps.append(TranscriptStep(comments, directive, directive_line, "\n".join(output)))
        comments = []
    while comments and not comments[-1].strip():
        comments.pop()
    return steps, comments


def render_transcript(
    steps: list[TranscriptStep], trailing: list[str], *, output_for: Callable[[TranscriptStep], str]
) -> str:
    """Write steps back with the output `output_for(step)` gives (used by the rewrite mode)."""
    parts: list[str] = []
    for step in steps:
        block = [*step.comments, step.directive, _SEPARATOR]
        output = output_for(step).rstrip("\n")
        if any(not line.strip() for line in output.split("\n")) and output:
            block += [_SEPARATOR, output, _SEPARATOR, _SEPARATOR]
        elif output:
            block.append(output)
        parts.append("\n".join(block))
    text = "\n\n".join(parts) + "\n"
    if trailing:
        text += "\n" + "\n".join(trailing) + "\n"
    return text
