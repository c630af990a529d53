"""The kopf handlers: thin wiring from KRaftCluster events to the reconciler on the Kubernetes runtime
(`wiring`), and the `kraftwerk operator` process that runs them (`running`)."""

from kraft_operator.handlers.running import add_arguments, run
from kraft_operator.handlers.wiring import FINALIZER, OperatorState, build_registry, status_patch

__all__ = ["FINALIZER", "OperatorState", "add_arguments", "build_registry", "run", "status_patch"]
