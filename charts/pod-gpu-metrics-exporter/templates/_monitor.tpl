{{/* The scrape endpoint a ServiceMonitor or PodMonitor shares; argument: (list root monitorValues). */}}
{{- define "pgme.monitorEndpoint" -}}
{{- $root := index . 0 }}{{ $m := index . 1 -}}
path: {{ $root.Values.web.telemetryPath }}
interval: {{ $m.interval }}
{{- with $m.scrapeTimeout }}
scrapeTimeout: {{ . }}
{{- end }}
{{- if $root.Values.web.tls }}
scheme: https
{{- with $m.tlsConfig }}
tlsConfig:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
{{- with $m.basicAuth }}
basicAuth:
  {{- toYaml . | nindent 2 }}
{{- end }}
# The exporter's namespace/pod/container name the pod holding the GPU and must win over the
# target's own.
honorLabels: true
relabelings:
  - sourceLabels: [__meta_kubernetes_pod_node_name]
    action: replace
    targetLabel: node
  # The operator names the scraped pod (the exporter) in namespace/pod/container: samples of GPUs
  # nobody holds carry no owner labels and would count as the exporter's own GPUs.
  - action: labeldrop
    regex: namespace|pod|container
  {{- with $m.relabelings }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with $m.metricRelabelings }}
metricRelabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
