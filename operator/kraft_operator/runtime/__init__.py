"""Runtimes: the port the reconciler drives (`Runtime`), and its implementations. The local
runtime (`kraft_operator.runtime.local`) runs nodes as processes on one machine; the Kubernetes
runtime runs them as Pods."""

from kraft_operator.runtime.port import Runtime, RuntimeActionError

__all__ = ["Runtime", "RuntimeActionError"]
