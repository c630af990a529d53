"""The report looked at as a person would: rendered by a real browser (headless Chromium), not
only parsed. Two clusters, one healthy and one with a torn tail, go through the job; the browser
must lay out a section per cluster with its two plots decoded at full size and shown, and the
check table with every status cell coloured (green for pass, red for fail); the screenshot must
hold the plots' own colours. Skips without Chromium (`apt-get install chromium`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fleets import TORN_CLUSTER_ID, WHOLE_CLUSTER_ID, whole_and_torn
from headless import layout, screenshot
from matplotlib.image import imread
from pyspark.sql import SparkSession

from kraft_pipeline.job import REPORT_NAME, run
from kraft_pipeline.report import TIMELINE_EVENTS

pytestmark = pytest.mark.timeout(900)

PASS_GREEN, FAIL_RED = "rgb(214, 240, 214)", "rgb(248, 208, 208)"


@pytest.fixture(scope="module")
def report(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = Path(tmp_path_factory.mktemp("render"))
    tables = run(inputs=[str(whole_and_torn(root / "input"))], output=str(root / "out"), spark=spark)
    assert tables.dr_checks.where("status = 'fail'").count() > 0
    return root / "out" / REPORT_NAME


def test_the_browser_lays_out_every_section_with_its_plots_and_checks(report: Path) -> None:
    page = layout(report)
    assert page["title"] == "kraftwerk pipeline report"
    assert [h for h, _ in page["h2"]] == [f"Cluster {WHOLE_CLUSTER_ID}", f"Cluster {TORN_CLUSTER_ID}"]
    assert all(width > 0 and height > 0 for _, (width, height) in page["h1"] + page["h2"] + page["h3"])
    assert [h for h, _ in page["h3"]] == ["Disaster-recovery checks"] * 2
    images = page["images"]
    assert [i["alt"] for i in images] == ["partition states over time", "lifecycle timeline"] * 2
    for image in images:
        # decoded by the browser (a broken data URI decodes to 0x0) and shown at its own size
        assert image["complete"] and min(image["decoded"]) > 200, image
        assert image["shown"] == image["decoded"], image
    checks = page["checks"]
    assert checks and all(min(c["shown"]) > 0 for c in checks)
    for c in checks:
        status = c["cells"][2]
        assert c["status_colour"] == {"PASS": PASS_GREEN, "FAIL": FAIL_RED}[status], c
    assert {c["cells"][2] for c in checks} == {"PASS", "FAIL"}


def test_the_screenshot_shows_the_plots_and_the_status_colours(report: Path) -> None:
    pixels = (imread(screenshot(report, report.parent / "report.png"))[:, :, :3] * 255).round().astype(int)
    colours = {(int(r), int(g), int(b)) for r, g, b in np.unique(pixels.reshape(-1, 3), axis=0)}

    def hex_rgb(colour: str) -> tuple[int, ...]:
        return tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))

    # the URP plot's under-replicated line, the timeline's election marker, and both status cells
    wanted = {"under-replicated line": hex_rgb("#e31a1c"), "election marker": hex_rgb(TIMELINE_EVENTS["controller_elected"]),
              "pass cell": (214, 240, 214), "fail cell": (248, 208, 208)}
    missing = {name: rgb for name, rgb in wanted.items() if rgb not in colours}
    assert not missing, missing
