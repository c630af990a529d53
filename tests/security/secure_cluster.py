"""A controller and brokers as real processes, every listener secured: the controller listener
and the inter-broker listener (INTERNAL) on mTLS, the client listener (CLIENTS) on SASL_SSL with
SCRAM-SHA-512. Each node has its own certificate from the cluster CA (`pki`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from broker_processes import BrokerCluster
from pki import CertificateAuthority
from quorum_processes import HOST, Node, free_ports

from kraft_engine.records import feature_versions, metadata_version


@dataclass
class SecureCluster(BrokerCluster):
    ca: CertificateAuthority = field(default_factory=CertificateAuthority)
    client_ports: dict[int, int] = field(default_factory=dict)
    #: A node whose certificate comes from this CA instead (an impostor).
    rogue_ca: dict[int, CertificateAuthority] = field(default_factory=dict)

    def _tls(self, node: Node) -> dict[str, str]:
        directory = node.config_path.parent
        ca = self.rogue_ca.get(node.node_id, self.ca)
        issued = ca.issue(f"node-{node.node_id}", organization="kraftwerk")
        keystore = issued.keystore_pem(directory, "node")
        return {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca.write(directory)),
            "ssl.client.auth": "required",
        }

    def write_config(self, node: Node, *, bootstrap_ids: list[int] | None = None) -> None:
        super().write_config(node, bootstrap_ids=bootstrap_ids)
        properties = dict(line.split("=", 1) for line in node.config_path.read_text().splitlines() if "=" in line)
        properties |= self._tls(node)
        if node.node_id in self.brokers:
            if node.node_id not in self.client_ports:
                (self.client_ports[node.node_id],) = free_ports(1)
            properties |= {
                "listeners": f"INTERNAL://{HOST}:{self.broker_ports[node.node_id]},"
                             f"CLIENTS://{HOST}:{self.client_ports[node.node_id]}",
                "listener.security.protocol.map": "CONTROLLER:SSL,INTERNAL:SSL,CLIENTS:SASL_SSL",
                "inter.broker.listener.name": "INTERNAL",
                "sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256",
                "listener.name.clients.ssl.client.auth": "none",
                "offsets.topic.replication.factor": "2",
            }
        else:
            properties["listener.security.protocol.map"] = "CONTROLLER:SSL"
        node.config_path.write_text("".join(f"{k}={v}\n" for k, v in properties.items()), encoding="utf-8")

    def client_bootstrap(self) -> str:
        return ",".join(f"{HOST}:{self.client_ports[i]}" for i in sorted(self.brokers))


def start_secure_cluster(cluster: SecureCluster, *, brokers: int = 2, controller_flags: tuple[str, ...] = ()) -> None:
    """Controller 1 and brokers 101.. running; `controller_flags` go to the controller's format."""
    cluster.extra_config["kraftwerk.test.state.machine.enable"] = "false"
    cluster.add_node(1)
    levels = feature_versions.levels_every_node_supports(metadata_version.latest(), [
        feature_versions.supported_ranges(unstable_enabled=False),
        feature_versions.supported_ranges(unstable_enabled=False, broker=True),
    ])
    cluster.format_initial([1], *(f for name, level in levels.items() for f in ("-f", f"{name}={level}")),
                           *controller_flags)
    broker_ids = list(range(101, 101 + brokers))
    for node_id in broker_ids:
        cluster.add_broker(node_id)
        cluster.format(node_id)
    cluster.start_all([1, *broker_ids])
    cluster.wait_ready(broker_ids)
