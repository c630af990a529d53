"""The report as a browser shows it: headless Chromium loads the page and says what it laid out.

`layout` opens the report inside a probe page of the test's own (the report itself has no
scripts) and reads, after the browser has parsed, decoded and laid out everything: each heading
and its box, each image's decoded size and displayed box, and each check row's status cell colour.
`screenshot` is the page as pixels. Both skip the test when no Chromium is installed
(`apt-get install chromium`).
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

__all__ = ["layout", "screenshot"]

_PROBE = """<!DOCTYPE html><html><head><meta charset='utf-8'><title>probe</title></head><body>
<pre id='out'>the report did not load</pre>
<iframe src='{report}' style='width:1200px;height:4000px' onload="
  const d = this.contentDocument;
  const box = e => {{ const r = e.getBoundingClientRect(); return [Math.round(r.width), Math.round(r.height)]; }};
  const cell = c => c === null ? null : getComputedStyle(c).backgroundColor;
  document.getElementById('out').textContent = JSON.stringify({{
    title: d.title,
    h1: [...d.querySelectorAll('h1')].map(h => [h.textContent, box(h)]),
    h2: [...d.querySelectorAll('h2')].map(h => [h.textContent, box(h)]),
    h3: [...d.querySelectorAll('h3')].map(h => [h.textContent, box(h)]),
    images: [...d.images].map(i => ({{alt: i.alt, complete: i.complete, decoded: [i.naturalWidth, i.naturalHeight], shown: box(i)}})),
    checks: [...d.querySelectorAll('tr')].filter(r => r.querySelector('td')).map(r => ({{
      cells: [...r.querySelectorAll('td')].map(c => c.textContent), status_colour: cell(r.querySelector('.status')), shown: box(r)}})),
  }});
"></iframe></body></html>
"""


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found is not None:
            return found
    pytest.skip("no headless browser: install chromium (apt-get install chromium) to render the report")


def _run(*args: str) -> str:
    done = subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args],
        capture_output=True, text=True, timeout=180, check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"chromium exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


def layout(report: Path) -> dict[str, Any]:
    """What the browser laid out for `report` (see the module docstring)."""
    probe = report.parent / "probe.html"
    probe.write_text(_PROBE.format(report=html.escape(report.name, quote=True)))
    dom = _run("--allow-file-access-from-files", "--virtual-time-budget=30000", "--dump-dom", probe.as_uri())
    found = re.search(r"<pre id=\"out\">(.*?)</pre>", dom, re.S)
    if found is None:
        raise AssertionError(f"the probe page did not come back: {dom[:500]}")
    text = html.unescape(found.group(1))
    if not text.startswith("{"):
        raise AssertionError(f"the report did not load in the browser: {text}")
    value: dict[str, Any] = json.loads(text)
    return value


def screenshot(report: Path, out: Path, *, width: int = 1200, height: int = 2400) -> Path:
    _run(f"--window-size={width},{height}", f"--screenshot={out}", report.as_uri())
    return out
