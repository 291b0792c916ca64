{{/* The labels every manager object carries (as in config/manager). */}}
{{- define "lockwarden.labels" -}}
app.kubernetes.io/name: lockwarden
app.kubernetes.io/component: manager
{{- end -}}

{{/* The mode, validated. */}}
{{- define "lockwarden.mode" -}}
{{- if not (has .Values.mode (list "embedded" "ha")) -}}
{{- fail (printf "mode %q: want embedded or ha" .Values.mode) -}}
{{- end -}}
{{- if and (eq .Values.mode "ha") (lt (int .Values.ha.replicas) 2) -}}
{{- fail (printf "ha.replicas %v: want 2 or more (one replica is mode embedded or no HA at all)" .Values.ha.replicas) -}}
{{- end -}}
{{- if and (eq .Values.mode "ha") (lt (len .Values.ha.endpoints) 3) -}}
{{- fail "ha.endpoints: want the 3 or 5 members of your etcd cluster" -}}
{{- end -}}
{{- .Values.mode -}}
{{- end -}}
