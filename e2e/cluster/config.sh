# Shared settings of the e2e cluster scripts (sourced, not run). Every value can be overridden from
# the environment. The cache (Go build and module caches, binaries, images) lives in the user's cache
# directory, outside any clone, so a fresh clone on a warm machine (CI's case) reuses it; nothing
# depends on it being there. The cluster state lives in the repository, git-ignored.
repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
E2E_CACHE=${E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kraftwerk-e2e}   # go caches, binaries, images: kept by `down`
E2E_STATE=${E2E_STATE:-$repo_root/.e2e-state}   # one cluster's state: removed by `down`
E2E_BIN=$E2E_CACHE/bin
K8S_VERSION=${K8S_VERSION:-1.34.4}
HELM_VERSION=${HELM_VERSION:-v3.22.0}
COREDNS_VERSION=${COREDNS_VERSION:-v1.15.0}
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
E2E_NETNS=${E2E_NETNS:-kraftwerk-e2e}
E2E_HOST_PORT=${E2E_HOST_PORT:-16443}
E2E_NODE_NAME=${E2E_NODE_NAME:-e2e-node}
E2E_NODE_IP=10.123.0.2
E2E_SERVICE_CIDR=10.124.0.0/24
E2E_API_SERVICE_IP=10.124.0.1
E2E_POD_CIDR=10.125.0.0/24
E2E_CGROUP_PARENT=kraftwerk-e2e
E2E_DNS_SERVICE_IP=10.124.0.10
# the uid the kraftwerk image runs as; the hostPath provisioner makes volumes owned by it
E2E_POD_UID=${E2E_POD_UID:-10001}
