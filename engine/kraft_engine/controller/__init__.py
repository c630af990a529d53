"""The quorum controller: a single-threaded event loop over timeline state and the control
managers that generate records and, separately, replay them. Pure."""

__all__: list[str] = []
