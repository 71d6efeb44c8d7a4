{{/*
egret.fullname: the prefix of every object's name. "egret" for a release
named egret (the names kustomize renders); RELEASE-egret otherwise, unless
the release name already holds the chart's name; fullnameOverride wins.
40 characters at most: the longest suffix is -webhook-trust-source.
*/}}
{{- define "egret.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "egret.gateway" -}}{{ include "egret.fullname" . }}-gateway{{- end -}}
{{- define "egret.webhook" -}}{{ include "egret.fullname" . }}-webhook{{- end -}}

{{/* Labels of every object. Selectors use app.kubernetes.io/name only:
they are immutable, and an upgrade from an earlier chart keeps them. */}}
{{- define "egret.labels" -}}
app.kubernetes.io/part-of: egret
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "egret.image" -}}
{{- $i := .Values.image -}}
{{- $ref := printf "%s/%s" $i.registry $i.repository | trimPrefix "/" -}}
{{- if $i.digest -}}
{{- printf "%s@%s" $ref $i.digest -}}
{{- else -}}
{{- printf "%s:%s" $ref (default .Chart.AppVersion $i.tag) -}}
{{- end -}}
{{- end -}}

{{/*
egret.podSecurityContext / egret.containerSecurityContext: runAsNonRoot
and no fixed user unless securityContext.runAsUser asks for one: the
image's numeric user runs, or the one the platform assigns (OpenShift's
restricted-v2 SCC picks from the namespace's range).
*/}}
{{- define "egret.podSecurityContext" -}}
runAsNonRoot: true
{{- with .Values.securityContext.runAsUser }}
runAsUser: {{ . }}
{{- end }}
{{- with .Values.securityContext.runAsGroup }}
runAsGroup: {{ . }}
{{- end }}
{{- with .Values.securityContext.fsGroup }}
fsGroup: {{ . }}
{{- end }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "egret.containerSecurityContext" -}}
runAsNonRoot: true
{{- with .Values.securityContext.runAsUser }}
runAsUser: {{ . }}
{{- end }}
{{- with .Values.securityContext.runAsGroup }}
runAsGroup: {{ . }}
{{- end }}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/*
egret.scheduling: what a platform team sets on each component's pods.
Call with (dict "c" .Values.gateway "root" $).
*/}}
{{- define "egret.scheduling" -}}
{{- with .c.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .c.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- range . }}
  - name: {{ . }}
  {{- end }}
{{- end }}
{{- end -}}

{{/* The gateway configuration's intercept section (intercept.enabled). */}}
{{- define "egret.interceptConfig" -}}
intercept:
  ca_dir: /var/run/secrets/egret/intercept-ca
  secrets: {{ .Values.intercept.secrets | toJson }}
  {{- with .Values.intercept.publishConfigMap }}
  publish_configmap: {{ $.Release.Namespace }}/{{ . }}
  {{- end }}
  {{- with .Values.intercept.sites }}
  sites:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
