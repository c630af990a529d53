"""`kraft metadata-quorum add-controller` finds the new controller's config in every place a runbook
may put it: Kafka's `--command-config` before the verb, the issue's `add-controller --command-config
FILE --config NODE_CONFIG`, or `--config` alone. `--dry-run` reads the config and meta.properties
and prints what would be added without contacting the quorum."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from kraft_engine.cli.main import main
from kraft_engine.kafka_uuid import to_kafka_str
from kraft_engine.storage.meta_properties import read_meta_properties

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qk"
# Nothing listens here: a dry run must not need the quorum.
NOWHERE = "127.0.0.1:1"


def _formatted_controller(tmp_path: Path) -> tuple[Path, str]:
    config = tmp_path / "controller.properties"
    config.write_text(
        "process.roles=controller\n"
        "node.id=4\n"
        "listeners=CONTROLLER://localhost:19097\n"
        "controller.listener.names=CONTROLLER\n"
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT\n"
        "controller.quorum.bootstrap.servers=localhost:19093\n"
        f"log.dirs={tmp_path / 'meta'}\n"
    )
    assert main(["storage", "format", "-c", str(config), "-t", CLUSTER_ID, "--no-initial-controllers"]) == 0
    directory_id = read_meta_properties(tmp_path / "meta").directory_id
    assert directory_id is not None
    return config, to_kafka_str(directory_id)


@pytest.mark.parametrize(
    "placement",
    [
        pytest.param(lambda c, admin: ["--command-config", str(c), "add-controller"], id="kafka-command-config"),
        pytest.param(lambda c, admin: ["add-controller", "--config", str(c)], id="config"),
        pytest.param(lambda c, admin: ["add-controller", "--command-config", str(admin), "--config", str(c)],
                     id="issue-form"),
        pytest.param(lambda c, admin: ["add-controller", "--command-config", str(c)], id="command-config-after-verb"),
    ],
)
def test_add_controller_dry_run_reads_the_new_controllers_config(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                  placement: Callable[[Path, Path], list[str]]) -> None:
    config, directory_id = _formatted_controller(tmp_path)
    admin_config = tmp_path / "admin.properties"
    admin_config.write_text("client.id=runbook\n")
    capsys.readouterr()
    code = main(["metadata-quorum", "--bootstrap-controller", NOWHERE, *placement(config, admin_config), "--dry-run"])
    assert code == 0
    assert capsys.readouterr().out == (
        f"DRY RUN of adding controller 4 with directory id {directory_id} and endpoints: CONTROLLER://localhost:19097\n"
    )


def test_add_controller_without_a_config_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["metadata-quorum", "--bootstrap-controller", NOWHERE, "add-controller", "--dry-run"])
    assert code == 1
    assert "You must supply the configuration file of the controller you are adding" in capsys.readouterr().err
