"""KRaft consensus: a pure state machine (roles, elections, pull replication, commit, snapshots,
KIP-853 voter changes). No I/O: time comes in as an argument and randomness from an injected
`random.Random`; effects go out as data for the driver to perform."""

__all__: list[str] = []
