{{/*
The team: required, a DNS-1123 label (values.schema.json checks the pattern; this guards
installs run with --skip-schema-validation).
*/}}
{{- define "mpi-tenant.team" -}}
{{- required "team is required: pass the team name, e.g. --set team=team-cv" .Values.team -}}
{{- end -}}

{{/* The team namespace: namespace.name, or the team name. */}}
{{- define "mpi-tenant.namespace" -}}
{{- .Values.namespace.name | default (include "mpi-tenant.team" .) -}}
{{- end -}}

{{/* Name of the LocalQueue: localQueue.name, or <team>-queue. */}}
{{- define "mpi-tenant.localQueueName" -}}
{{- .Values.localQueue.name | default (printf "%s-queue" (include "mpi-tenant.team" .)) -}}
{{- end -}}

{{/* Chart label value: <name>-<version>, "+" replaced (not allowed in label values). */}}
{{- define "mpi-tenant.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Labels of every object. Call with (dict "ctx" $ "component" "<component>").
*/}}
{{- define "mpi-tenant.labels" -}}
{{- $ctx := .ctx -}}
app.kubernetes.io/name: {{ $ctx.Chart.Name }}
app.kubernetes.io/instance: {{ $ctx.Release.Name | quote }}
app.kubernetes.io/version: {{ $ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ $ctx.Release.Service }}
app.kubernetes.io/part-of: mpiplat
app.kubernetes.io/component: {{ .component }}
helm.sh/chart: {{ include "mpi-tenant.chart" $ctx }}
mpiplat.io/team: {{ include "mpi-tenant.team" $ctx }}
{{- range $k, $v := $ctx.Values.commonLabels }}
{{ $k }}: {{ $v | quote }}
{{- end }}
{{- end -}}

{{/*
metadata: name, namespace, labels of a namespaced object.
Call with (dict "ctx" $ "name" "<name>" "component" "<component>").
*/}}
{{- define "mpi-tenant.metadata" -}}
metadata:
  name: {{ .name }}
  namespace: {{ include "mpi-tenant.namespace" .ctx }}
  labels:
    {{- include "mpi-tenant.labels" (dict "ctx" .ctx "component" .component) | nindent 4 }}
{{- end -}}

{{/*
A quantity as a quoted string. Numbers from values files arrive as float64: whole numbers are
printed as integers (64, not 6.4e+01).
*/}}
{{- define "mpi-tenant.quantity" -}}
{{- if kindIs "string" . -}}
{{- . | quote -}}
{{- else if eq (float64 .) (floor .) -}}
{{- int64 . | toString | quote -}}
{{- else -}}
{{- toString . | quote -}}
{{- end -}}
{{- end -}}

{{/* A list of {port, protocol} as a YAML list of NetworkPolicyPort objects (protocol defaults to TCP). */}}
{{- define "mpi-tenant.ports" -}}
{{- $out := list -}}
{{- range . -}}
{{- $out = append $out (dict "protocol" (.protocol | default "TCP") "port" (int64 .port)) -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* Cluster DNS peers and ports by networkPolicy.egress.dns.preset. */}}
{{- define "mpi-tenant.dnsPresets" -}}
kube-dns:
  namespaceSelector:
    kubernetes.io/metadata.name: kube-system
  podSelector:
    k8s-app: kube-dns
  ports:
    - {port: 53, protocol: UDP}
    - {port: 53, protocol: TCP}
openshift-dns:
  namespaceSelector:
    kubernetes.io/metadata.name: openshift-dns
  podSelector:
    dns.operator.openshift.io/daemonset-dns: default
  ports:
    - {port: 5353, protocol: UDP}
    - {port: 5353, protocol: TCP}
{{- end -}}
