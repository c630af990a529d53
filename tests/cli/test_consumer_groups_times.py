"""The time arguments of `kraft consumer-groups --reset-offsets`, read as Kafka's tool reads them:
`--to-datetime` as Utils.getDateTime (UTC unless the time names its zone) and `--by-duration` as
java.time.Duration.parse; anything else refused before a request is sent."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from kraft_engine.cli.consumer_groups import iso_duration_ms, kafka_date_time_ms
from kraft_engine.cli.main import CliError, main

_SIX_UTC_MS = int(datetime(2026, 11, 26, 6, tzinfo=UTC).timestamp() * 1000)


@pytest.mark.parametrize("text", ["2026-11-26T06:00:00.000", "2026-11-26T06:00:00.000Z",
                                  "2026-11-26T07:00:00.000+01:00", "2026-11-26T07:00:00.000+0100",
                                  "2026-11-26T07:00:00.000+01", "2026-11-26T01:30:00.000-04:30"])
def test_a_date_time_is_utc_unless_it_names_its_zone(text: str) -> None:
    assert kafka_date_time_ms(text) == _SIX_UTC_MS


@pytest.mark.parametrize("text", ["2026-11-26", "2026-11-26T06:00:00", "2026-11-26 06:00:00.000", "yesterday"])
def test_a_date_time_without_kafkas_fields_is_refused(text: str) -> None:
    with pytest.raises(CliError):
        kafka_date_time_ms(text)


@pytest.mark.parametrize(("text", "ms"), [("PT1H", 3_600_000), ("P1DT2H3M4.5S", 93_784_500), ("-PT5S", -5000),
                                          ("PT0.001S", 1), ("P2D", 172_800_000), ("pt10m", 600_000)])
def test_durations_are_javas(text: str, ms: int) -> None:
    assert iso_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["P", "PT", "1H", "PT1X", "P1H", "P1DT"])
def test_a_duration_java_refuses_is_refused(text: str) -> None:
    with pytest.raises(CliError, match="Text cannot be parsed to a Duration"):
        iso_duration_ms(text)


def test_the_reset_scenarios_are_exclusive_and_checked_before_anything_is_sent(
        capsys: pytest.CaptureFixture[str]) -> None:
    base = ["consumer-groups", "--bootstrap-server", "127.0.0.1:1", "--reset-offsets", "--group", "g", "--topic", "t"]
    assert main([*base, "--to-current", "--to-latest"]) == 1
    assert "takes exactly one of the scenarios" in capsys.readouterr().err
    assert main([*base, "--by-duration", "PT"]) == 1
    assert "Text cannot be parsed to a Duration: PT" in capsys.readouterr().err
    assert main(["consumer-groups", "--bootstrap-server", "127.0.0.1:1", "--describe", "--group", "g",
                 "--all-groups"]) == 1
    assert "takes one of these options: [all-groups], [group]" in capsys.readouterr().err
