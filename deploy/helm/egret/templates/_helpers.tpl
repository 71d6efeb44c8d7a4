{{- define "egret.labels" -}}
app.kubernetes.io/part-of: egret
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
