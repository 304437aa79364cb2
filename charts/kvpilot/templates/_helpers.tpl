{{/* The release's full name, at most 63 characters. */}}
{{- define "kvpilot.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels every object carries. */}}
{{- define "kvpilot.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Labels that select the operator's pods. */}}
{{- define "kvpilot.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "kvpilot.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kvpilot.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "kvpilot.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "kvpilot.webhookService" -}}{{ include "kvpilot.fullname" . }}-webhook{{- end -}}
{{- define "kvpilot.webhookSecret" -}}{{ include "kvpilot.fullname" . }}-webhook-tls{{- end -}}
{{- define "kvpilot.selfSigned" -}}{{ and .Values.webhook.enabled (eq .Values.webhook.certificates.mode "self-signed") }}{{- end -}}
{{- define "kvpilot.certManager" -}}{{ and .Values.webhook.enabled (eq .Values.webhook.certificates.mode "cert-manager") }}{{- end -}}

{{/* Where the webhook reads its certificate: files kvpilot writes (self-signed), or the
     mounted cert-manager Secret. */}}
{{- define "kvpilot.tlsDir" -}}
{{- if eq .Values.webhook.certificates.mode "self-signed" -}}/tmp/kvpilot-tls{{- else -}}/etc/kvpilot/tls{{- end -}}
{{- end -}}

{{/* The restricted container security context (Pod Security Standards "restricted"). */}}
{{- define "kvpilot.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The SGLang guard is served (it rides on the webhook server). */}}
{{- define "kvpilot.guard" -}}{{ and .Values.webhook.enabled .Values.guard.enabled }}{{- end -}}

{{/* A MutatingWebhookConfiguration exists: InferenceDeployment rewrites, or guard rewrites. */}}
{{- define "kvpilot.mutating" -}}
{{ or .Values.webhook.mutating.enabled (and (eq (include "kvpilot.guard" .) "true") .Values.guard.rewrite) }}
{{- end -}}
