{{/* Names, labels and the choices every template shares. */}}

{{- define "pgme.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's base name: the release name alone when it already holds the chart's name. */}}
{{- define "pgme.fullname" -}}
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

{{- define "pgme.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pgme.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "pgme.labels" -}}
{{ include "pgme.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{- define "pgme.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "pgme.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "pgme.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The GPU operator's dcgm-exporter operands this release reads, as a space-separated list:
     "classic" (ClusterPolicy), "dra" (GPUCluster), both under "auto"; empty without the operator. */}}
{{- define "pgme.operands" -}}
{{- if .Values.gpuOperator.enabled }}
{{- if eq .Values.gpuOperator.dcgmExporter "auto" }}classic dra{{ else }}{{ .Values.gpuOperator.dcgmExporter }}{{ end }}
{{- end }}
{{- end }}

{{/* Per operand: its pods' label, the node label the operator sets where it runs them, and the
     node-local Service this chart puts in front of them. */}}
{{- define "pgme.operand" -}}
{{- $root := index . 0 }}{{ $operand := index . 1 }}
{{- $suffix := ternary "" "-dra" (eq $operand "classic") }}
app: {{ printf "nvidia-dcgm-exporter%s" $suffix }}
nodeLabel: {{ printf "nvidia.com/gpu.deploy.dcgm-exporter%s" $suffix }}
service: {{ printf "%s-dcgm-local%s" (include "pgme.fullname" $root) $suffix | trunc 63 | trimSuffix "-" }}
workload: {{ printf "%s%s" (include "pgme.fullname" $root) $suffix | trunc 63 | trimSuffix "-" }}
component: {{ printf "gpu-metrics%s" $suffix }}
{{- end }}

{{/* The pods' affinity: the user's (values.affinity); under "auto", the DRA operand's DaemonSet also
     keeps off nodes that carry the ClusterPolicy operand's label. The operator never sets both, but a
     label left behind by a move from one mode to the other would otherwise put two exporters on one
     node, and every GPU's series would be served twice. Added to each of the user's required node
     selector terms (terms are ORed, so one without it would let such a node in). */}}
{{- define "pgme.affinity" -}}
{{- $root := index . 0 }}{{ $operand := index . 1 }}
{{- $affinity := deepCopy ($root.Values.affinity | default dict) }}
{{- if and (eq $operand "dra") (eq $root.Values.gpuOperator.dcgmExporter "auto") }}
{{- $notClassic := dict "key" "nvidia.com/gpu.deploy.dcgm-exporter" "operator" "NotIn" "values" (list "true") }}
{{- $nodeAffinity := get $affinity "nodeAffinity" | default dict }}
{{- $required := get $nodeAffinity "requiredDuringSchedulingIgnoredDuringExecution" | default dict }}
{{- $terms := list }}
{{- range (get $required "nodeSelectorTerms" | default (list dict)) }}
{{- $term := deepCopy . }}
{{- $_ := set $term "matchExpressions" (append (get $term "matchExpressions" | default list) $notClassic) }}
{{- $terms = append $terms $term }}
{{- end }}
{{- $_ := set $required "nodeSelectorTerms" $terms }}
{{- $_ := set $nodeAffinity "requiredDuringSchedulingIgnoredDuringExecution" $required }}
{{- $_ := set $affinity "nodeAffinity" $nodeAffinity }}
{{- end }}
{{- if $affinity }}{{ toYaml $affinity }}{{ end }}
{{- end }}

{{/* Whether --labels.extra (config) asks for the queue labels: their RBAC rules follow it. */}}
{{- define "pgme.queueLabels" -}}
{{- $extra := (index .Values.config "labels.extra") | default "" | toString }}
{{- if has "queue" (splitList "," (nospace $extra)) }}true{{ end }}
{{- end }}

{{/* Where this exporter scrapes dcgm-exporter: the node-local Service of the operand, the sidecar
     on loopback, or (neither) the exporter's own default unless config names one. */}}
{{- define "pgme.dcgmUrl" -}}
{{- $root := index . 0 }}{{ $operand := index . 1 }}
{{- if $operand }}
{{- $o := include "pgme.operand" (list $root $operand) | fromYaml }}
{{- printf "http://%s.%s.svc:9400/metrics" $o.service $root.Values.gpuOperator.namespace }}
{{- else if $root.Values.dcgmExporter.enabled }}
{{- printf "http://%s/metrics" $root.Values.dcgmExporter.listenAddress }}
{{- end }}
{{- end }}

{{/* The exporter's flags, as one map: what the shape decides, then `config` over it. Rendered
     sorted by name, so a rendering is stable. */}}
{{- define "pgme.args" -}}
{{- $root := index . 0 }}{{ $operand := index . 1 }}
{{- $flags := dict "kubelet.socket" "/var/lib/kubelet/pod-resources/kubelet.sock" }}
{{- $url := include "pgme.dcgmUrl" (list $root $operand) }}
{{- if $url }}{{ $_ := set $flags "dcgm.url" $url }}{{ end }}
{{- if not $root.Values.kubernetes.enabled }}{{ $_ := set $flags "kubernetes.api" "off" }}{{ end }}
{{- if eq $root.Values.sharing.mode "process" }}
{{- $_ := set $flags "sharing.mode" "process" }}
{{- $_ := set $flags "sharing.proc-root" (ternary "/host/proc" "/proc" $root.Values.sharing.hostProc) }}
{{- end }}
{{- if $root.Values.web.existingSecret }}
{{- $_ := set $flags "web.config.file" (printf "/etc/pod-gpu-metrics-exporter/web/%s" $root.Values.web.existingSecretKey) }}
{{- end }}
{{- /* Only where they differ from the exporter's own defaults (tests/artifacts/test_chart.py holds
       those equal to exporter/config.py), so the default rendering names neither. */}}
{{- if ne (int $root.Values.web.port) 9400 }}
{{- $_ := set $flags "web.listen-address" (printf ":%d" (int $root.Values.web.port)) }}
{{- end }}
{{- if ne $root.Values.web.telemetryPath "/gpu/metrics" }}
{{- $_ := set $flags "web.telemetry-path" $root.Values.web.telemetryPath }}
{{- end }}
{{- range $name, $value := $root.Values.config }}
{{- if kindIs "invalid" $value }}{{ $_ := unset $flags $name }}{{ else }}{{ $_ := set $flags $name $value }}{{ end }}
{{- end }}
{{- range $name, $value := $flags }}
- {{ printf "--%s=%v" $name $value | quote }}
{{- end }}
{{- range $root.Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/* web.port and web.telemetryPath are the one place to move the exporter's listener: the container
     port, probes, Service, monitors and prometheus.io annotations follow them. The same flags through
     config or extraArgs would move the listener alone, into a pod whose probes fail and whose scrapes
     miss, so they are refused naming the value to use. So is a port the dcgm-exporter sidecar already
     takes in the pod's shared network. Renders nothing. */}}
{{- define "pgme.checkWeb" -}}
{{- $values := .Values }}
{{- $follow := dict "web.port" "the container port, probes, Service, monitors and prometheus.io annotations follow it"
                    "web.telemetryPath" "the monitors and the prometheus.io/path annotation follow it" }}
{{- range $flag, $value := dict "web.listen-address" "web.port" "web.telemetry-path" "web.telemetryPath" }}
{{- if hasKey $values.config $flag }}
{{- fail (printf "config.%s is not allowed: set %s instead (%s)" $flag $value (get $follow $value)) }}
{{- end }}
{{- range $values.extraArgs }}
{{- if hasPrefix (printf "--%s" $flag) (toString .) }}
{{- fail (printf "extraArgs may not set --%s: set %s instead (%s)" $flag $value (get $follow $value)) }}
{{- end }}
{{- end }}
{{- end }}
{{- if has $values.web.telemetryPath (list "/" "/metrics" "/healthz") }}
{{- fail (printf "web.telemetryPath %s is a route the exporter serves itself (/, /metrics, /healthz): choose another, e.g. /gpu/metrics" $values.web.telemetryPath) }}
{{- end }}
{{- $sidecar := and $values.dcgmExporter.enabled (not $values.gpuOperator.enabled) }}
{{- if and $sidecar (eq (toString (int $values.web.port)) (regexFind "[0-9]+$" $values.dcgmExporter.listenAddress)) }}
{{- fail (printf "web.port %d is the port of dcgmExporter.listenAddress (%s), in the same pod: choose another" (int $values.web.port) $values.dcgmExporter.listenAddress) }}
{{- end }}
{{- end }}
