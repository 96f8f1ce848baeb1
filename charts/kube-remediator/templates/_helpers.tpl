{{/* The chart's name, or nameOverride. */}}
{{- define "kube-remediator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The name of every object of the release: fullnameOverride, else the release name when it already
contains the chart's name, else "<release>-<chart>". At most 63 characters (DNS labels).
*/}}
{{- define "kube-remediator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "kube-remediator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "kube-remediator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels that select the operator's pods. */}}
{{- define "kube-remediator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kube-remediator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The ServiceAccount the operator runs as. */}}
{{- define "kube-remediator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kube-remediator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The image reference: repository:tag, or repository@digest when a digest is given. */}}
{{- define "kube-remediator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository .Values.image.tag }}
{{- end }}
{{- end }}

{{/*
The namespace of the kubelets' Leases, which the operator reads to tell a dead kubelet from a slow
one (NODE_LEASE_NAMESPACE in src/adapters/mod.rs).
*/}}
{{- define "kube-remediator.nodeLeaseNamespace" -}}
kube-node-lease
{{- end }}

{{/* The name of the leader-election Lease, in the release namespace: the Deployment's
--leader-election-lease and the only Lease the leader-election Role grants. */}}
{{- define "kube-remediator.leaderLease" -}}
kube-remediator
{{- end }}

{{/* The name of the admission guard's ValidatingAdmissionPolicy and of its binding. */}}
{{- define "kube-remediator.admissionGuardName" -}}
{{- printf "%s-admission-guard" (include "kube-remediator.fullname" .) }}
{{- end }}
