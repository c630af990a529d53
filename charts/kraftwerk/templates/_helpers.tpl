{{- define "kraftwerk.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kraftwerk.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "kraftwerk.labels" -}}
{{ include "kraftwerk.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kraftwerk
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kraftwerk.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kraftwerk.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The namespaces the operator watches (namespaced mode): the list, or the release namespace. */}}
{{- define "kraftwerk.watchNamespaces" -}}
{{- if .Values.watchNamespaces -}}
{{- join "," .Values.watchNamespaces -}}
{{- else -}}
{{- .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{/* The rules the operator needs in a namespace it manages; shared by the Role and the ClusterRole. */}}
{{- define "kraftwerk.managedRules" -}}
- apiGroups: [kraftwerk.io]
  resources: [kraftclusters]
  verbs: [get, list, watch, patch]
- apiGroups: [kraftwerk.io]
  resources: [kraftclusters/status]
  verbs: [get, patch]
# owner references with blockOwnerDeletion need update on the owner's finalizers subresource
- apiGroups: [kraftwerk.io]
  resources: [kraftclusters/finalizers]
  verbs: [update]
# patch: the broker-rack annotation a rack-aware broker pod's init container waits for
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [services, configmaps]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch, create, delete]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
# spec.tls and spec.users: the clusters' CAs, node and operator certificates, users' credentials
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, list, create, update, delete]
# spec.tls / listeners' networkPolicyPeers: each cluster's NetworkPolicy
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, list, watch, create, patch, delete]
{{- end -}}
