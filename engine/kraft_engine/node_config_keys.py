"""The config keys that wire one node into its cluster, in one place for the engine and the operator.

A node's roles, id, listeners, quorum addresses, directories and rack are not tunables: they say
which node this is and how it reaches the others. The engine's config parser reads them as
structured values (not as plain ints or booleans), and the operator writes them from the spec and
refuses a user's override of any of them. Both import this set, so a key added to one is in the
other. A leaf module with no imports: the operator's pure plan imports it without the node's
`server` package.
"""

__all__ = ["NODE_WIRING_KEYS"]

NODE_WIRING_KEYS = frozenset(
    {
        "process.roles",
        "node.id",
        "listeners",
        "advertised.listeners",
        "listener.security.protocol.map",
        "controller.listener.names",
        "inter.broker.listener.name",
        "security.inter.broker.protocol",
        "controller.quorum.voters",
        "controller.quorum.bootstrap.servers",
        "log.dirs",
        "log.dir",
        "metadata.log.dir",
        "broker.rack",
    }
)
