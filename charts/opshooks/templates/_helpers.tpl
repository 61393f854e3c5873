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

{{/* http or https: the hooks' scheme, also the name of the container and Service port. */}}
{{- define "opshooks.scheme" -}}
{{ ternary "https" "http" .Values.tls.enabled }}
{{- end }}

{{/* The Service's port. */}}
{{- define "opshooks.servicePort" -}}
{{ ternary .Values.service.tlsPort .Values.service.port .Values.tls.enabled }}
{{- end }}

{{/* The base URL at which Metacontroller reaches the hooks. */}}
{{- define "opshooks.baseUrl" -}}
{{- if .Values.controllers.baseUrl -}}
{{ .Values.controllers.baseUrl }}
{{- else -}}
{{ include "opshooks.scheme" . }}://{{ include "opshooks.fullname" . }}.{{ .Release.Namespace }}.svc:{{ include "opshooks.servicePort" . }}
{{- end -}}
{{- end }}

{{/* The Secret with the serving certificate (tls.crt, tls.key, ca.crt). */}}
{{- define "opshooks.tlsSecretName" -}}
{{ .Values.tls.secretName | default (printf "%s-tls" (include "opshooks.fullname" .)) }}
{{- end }}

{{/* The Secret with Metacontroller's client certificate. */}}
{{- define "opshooks.clientSecretName" -}}
{{ .Values.tls.clientAuth.clientSecretName | default (printf "%s-metacontroller-client" (include "opshooks.fullname" .)) }}
{{- end }}

{{/* The Secret with the bearer token, and its key. */}}
{{- define "opshooks.authSecretName" -}}
{{ .Values.auth.existingSecret | default (printf "%s-auth" (include "opshooks.fullname" .)) }}
{{- end }}
{{- define "opshooks.authSecretKey" -}}
{{ ternary .Values.auth.existingSecretKey "token" (ne .Values.auth.existingSecret "") }}
{{- end }}

{{/* The cert-manager issuer of the chart's certificates: the one in values,
or the release's own CA Issuer (certificates.yaml). */}}
{{- define "opshooks.issuerRef" -}}
{{- $ref := .Values.tls.certManager.issuerRef -}}
{{- if $ref.name -}}
name: {{ $ref.name }}
kind: {{ $ref.kind | default "Issuer" }}
group: {{ $ref.group | default "cert-manager.io" }}
{{- else -}}
name: {{ include "opshooks.fullname" . }}-ca
kind: Issuer
group: cert-manager.io
{{- end }}
{{- end }}

{{/* Where Metacontroller finds the CA that signed the serving certificate:
tls.caBundle when set, else the serving Secret's ca.crt. */}}
{{- define "opshooks.caBundle" -}}
{{- $ca := .Values.tls.caBundle -}}
{{- if $ca.inline -}}
inline: {{ $ca.inline | quote }}
{{- else if $ca.secretRef.name -}}
secretRef:
  name: {{ $ca.secretRef.name }}
  namespace: {{ $ca.secretRef.namespace | default .Release.Namespace }}
  key: {{ $ca.secretRef.key }}
{{- else if $ca.configMapRef.name -}}
configMapRef:
  name: {{ $ca.configMapRef.name }}
  namespace: {{ $ca.configMapRef.namespace | default .Release.Namespace }}
  key: {{ $ca.configMapRef.key }}
{{- else -}}
secretRef:
  name: {{ include "opshooks.tlsSecretName" . }}
  namespace: {{ .Release.Namespace }}
  key: ca.crt
{{- end }}
{{- end }}

{{/* The fields every hook's webhook gets (templates/controllers.yaml, generated,
includes it): how Metacontroller verifies the hooks (caBundle), proves who it
is (clientTLS) and authenticates (authorization). Metacontroller reads the
Secrets once, when it starts a controller: see docs/installing.md on rotation. */}}
{{- define "opshooks.webhookAuth" -}}
{{- $ca := .Values.tls.caBundle -}}
{{- if or .Values.tls.enabled $ca.inline $ca.secretRef.name $ca.configMapRef.name }}
caBundle:
  {{- include "opshooks.caBundle" . | nindent 2 }}
{{- end }}
{{- if and .Values.tls.enabled .Values.tls.clientAuth.enabled }}
clientTLS:
  secretRef:
    name: {{ include "opshooks.clientSecretName" . }}
    namespace: {{ .Release.Namespace }}
  certKey: {{ .Values.tls.clientAuth.certKey }}
  privateKeyKey: {{ .Values.tls.clientAuth.privateKeyKey }}
{{- end }}
{{- if .Values.auth.enabled }}
authorization:
  type: Bearer
  secretRef:
    name: {{ include "opshooks.authSecretName" . }}
    namespace: {{ .Release.Namespace }}
    key: {{ include "opshooks.authSecretKey" . }}
{{- end }}
{{- end }}

{{/* Combinations of values that cannot work, refused with what to set. */}}
{{- define "opshooks.validate" -}}
{{- $tls := .Values.tls -}}
{{- if and $tls.enabled (not $tls.certManager.enabled) (not $tls.secretName) -}}
{{- fail "tls.enabled needs a certificate: set tls.secretName (a Secret with tls.crt, tls.key and ca.crt) or tls.certManager.enabled" -}}
{{- end -}}
{{- if and $tls.clientAuth.enabled (not $tls.enabled) -}}
{{- fail "tls.clientAuth.enabled needs tls.enabled" -}}
{{- end -}}
{{- if and $tls.clientAuth.enabled (not $tls.certManager.enabled) (not $tls.clientAuth.clientSecretName) -}}
{{- fail "tls.clientAuth.enabled without cert-manager needs tls.clientAuth.clientSecretName (Metacontroller's client certificate)" -}}
{{- end -}}
{{- $ca := $tls.caBundle -}}
{{- if gt (len (compact (list $ca.inline $ca.secretRef.name $ca.configMapRef.name))) 1 -}}
{{- fail "tls.caBundle: set at most one of inline, secretRef.name and configMapRef.name" -}}
{{- end -}}
{{- $timeout := .Values.controllers.hookTimeout -}}
{{- if regexMatch "^[0-9]+s$" $timeout -}}
{{- if ge (float64 .Values.server.requestTimeoutSeconds) (float64 (trimSuffix "s" $timeout)) -}}
{{- fail (printf "server.requestTimeoutSeconds (%v) must stay below controllers.hookTimeout (%s): Metacontroller would give up before opshooks answers" .Values.server.requestTimeoutSeconds $timeout) -}}
{{- end -}}
{{- end -}}
{{- end }}
