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
{{- if and .Values.nvidia.enabled .Values.gpuOperator.enabled }}
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

{{/* The pods' affinity: the user's (values.affinity), with node selector requirements added to each of
     the user's required node selector terms (terms are ORed, so one without them would let such a
     node in). Under "auto", the DRA operand's DaemonSet keeps off nodes that carry the ClusterPolicy
     operand's label: the operator never sets both, but a label left behind by a move from one mode to
     the other would otherwise put two exporters on one node, and every GPU's series would be served
     twice. Beside NVIDIA's DaemonSets, the AMD one keeps off every node they run on (pgme.nvidiaNodeLabels),
     so that no node ever gets two exporters. */}}
{{- define "pgme.affinity" -}}
{{- $root := index . 0 }}{{ $operand := index . 1 }}
{{- $affinity := deepCopy ($root.Values.affinity | default dict) }}
{{- $keepOff := list }}
{{- if and (eq $operand "dra") (eq $root.Values.gpuOperator.dcgmExporter "auto") }}
{{- $keepOff = list "nvidia.com/gpu.deploy.dcgm-exporter" }}
{{- else if and (eq $operand "amd") $root.Values.nvidia.enabled }}
{{- $keepOff = splitList " " (include "pgme.nvidiaNodeLabels" $root) }}
{{- end }}
{{- if $keepOff }}
{{- $nodeAffinity := get $affinity "nodeAffinity" | default dict }}
{{- $required := get $nodeAffinity "requiredDuringSchedulingIgnoredDuringExecution" | default dict }}
{{- $terms := list }}
{{- range (get $required "nodeSelectorTerms" | default (list dict)) }}
{{- $term := deepCopy . }}
{{- $expressions := get $term "matchExpressions" | default list }}
{{- range $keepOff }}
{{- $expressions = append $expressions (dict "key" . "operator" "NotIn" "values" (list "true")) }}
{{- end }}
{{- $_ := set $term "matchExpressions" $expressions }}
{{- $terms = append $terms $term }}
{{- end }}
{{- $_ := set $required "nodeSelectorTerms" $terms }}
{{- $_ := set $nodeAffinity "requiredDuringSchedulingIgnoredDuringExecution" $required }}
{{- $_ := set $affinity "nodeAffinity" $nodeAffinity }}
{{- end }}
{{- if $affinity }}{{ toYaml $affinity }}{{ end }}
{{- end }}

{{/* The node labels NVIDIA's DaemonSets select nodes by (each set to "true"), space-separated: the GPU
     operator's per operand read, else nvidia.com/gpu.present. */}}
{{- define "pgme.nvidiaNodeLabels" -}}
{{- $labels := list }}
{{- range splitList " " (include "pgme.operands" .) | compact }}
{{- $labels = append $labels (include "pgme.operand" (list $ .) | fromYaml).nodeLabel }}
{{- end }}
{{- join " " (default (list "nvidia.com/gpu.present") $labels) }}
{{- end }}

{{/* The AMD DaemonSet's names: its workload and component (beside NVIDIA's, never selecting their pods),
     and the node-local Service this chart puts in front of AMD's device-metrics-exporter. */}}
{{- define "pgme.amdWorkload" -}}
workload: {{ printf "%s-amd" (include "pgme.fullname" .) | trunc 63 | trimSuffix "-" }}
component: gpu-metrics-amd
service: {{ printf "%s-amd-metrics-local" (include "pgme.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Where the AMD pods read AMD's device-metrics-exporter: amd.metricsExporter.url as given, else the
     node-local Service in front of its pods. */}}
{{- define "pgme.amdMetricsUrl" -}}
{{- $exporter := .Values.amd.metricsExporter }}
{{- if $exporter.url }}
{{- $exporter.url }}
{{- else }}
{{- printf "http://%s.%s.svc:%d/metrics" (include "pgme.amdWorkload" . | fromYaml).service $exporter.namespace (int $exporter.port) }}
{{- end }}
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

{{/* The exporter's flags, as one map: what the shape decides, then `config` over it, and on the AMD
     pods `amd.config` over both. Rendered sorted by name, so a rendering is stable. */}}
{{- define "pgme.args" -}}
{{- $root := index . 0 }}{{ $operand := index . 1 }}
{{- $amd := eq $operand "amd" }}
{{- $flags := dict "kubelet.socket" "/var/lib/kubelet/pod-resources/kubelet.sock" }}
{{- if $amd }}
{{- /* The socket's folder and /sys are mounted by the DaemonSet (daemonset.yaml): the socket at its
       own path, /sys at /host/sys. */}}
{{- $_ := set $flags "gpu.vendor" "amd" }}
{{- $_ := set $flags "amd.metrics-url" (include "pgme.amdMetricsUrl" $root) }}
{{- $_ := set $flags "amd.metrics-socket" $root.Values.amd.metricsSocket }}
{{- $_ := set $flags "amd.sysfs-root" "/host/sys" }}
{{- else }}
{{- $url := include "pgme.dcgmUrl" (list $root $operand) }}
{{- if $url }}{{ $_ := set $flags "dcgm.url" $url }}{{ end }}
{{- end }}
{{- if not $root.Values.kubernetes.enabled }}{{ $_ := set $flags "kubernetes.api" "off" }}{{ end }}
{{- /* Process shares come from NVML: NVIDIA nodes only (the exporter refuses them on an AMD node). */}}
{{- if and (not $amd) (eq $root.Values.sharing.mode "process") }}
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
{{- $configs := list $root.Values.config }}
{{- if $amd }}{{ $configs = append $configs ($root.Values.amd.config | default dict) }}{{ end }}
{{- range $config := $configs }}
{{- range $name, $value := $config }}
{{- if kindIs "invalid" $value }}{{ $_ := unset $flags $name }}{{ else }}{{ $_ := set $flags $name $value }}{{ end }}
{{- end }}
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
{{- range $where, $config := dict "config" $values.config "amd.config" ($values.amd.config | default dict) }}
{{- if hasKey $config $flag }}
{{- fail (printf "%s.%s is not allowed: set %s instead (%s)" $where $flag $value (get $follow $value)) }}
{{- end }}
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
