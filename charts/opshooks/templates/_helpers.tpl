{{/* The chart name, for labels. */}}
{{- define "opshooks.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The prefix of every object name; also the Service name the hooks call. */}}
{{- define "opshooks.fullname" -}}
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

{{/* Labels on every object. */}}
{{- define "opshooks.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "opshooks.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: opshooks
{{- end }}

{{/* Labels that select the hook pods. */}}
{{- define "opshooks.selectorLabels" -}}
app.kubernetes.io/name: {{ include "opshooks.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The base URL at which Metacontroller reaches the hooks. */}}
{{- define "opshooks.baseUrl" -}}
{{- if .Values.controllers.baseUrl -}}
{{ .Values.controllers.baseUrl }}
{{- else -}}
http://{{ include "opshooks.fullname" . }}.{{ .Release.Namespace }}.svc:{{ .Values.service.port }}
{{- end -}}
{{- end }}
