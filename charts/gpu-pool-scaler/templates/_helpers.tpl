{{/* Names ------------------------------------------------------------------------- */}}
{{- define "gps.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gps.fullname" -}}
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

{{- define "gps.headlessName" -}}
{{- printf "%s-headless" (include "gps.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gps.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gps.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gps.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "gps.labels" -}}
helm.sh/chart: {{ include "gps.chart" . }}
{{ include "gps.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpu-pool-scaler
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "gps.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gps.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "gps.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{- define "gps.inferencePriorityClass" -}}
{{- default (printf "%s-inference" (include "gps.fullname" .)) .Values.priorityClasses.inference.name }}
{{- end }}

{{- define "gps.researchPriorityClass" -}}
{{- default (printf "%s-research" (include "gps.fullname" .)) .Values.priorityClasses.research.name }}
{{- end }}

{{- define "gps.authName" -}}
{{- default (printf "%s-tls" (include "gps.fullname" .)) .Values.keda.auth.name }}
{{- end }}

{{/* Name of the ScaledObject/ScaledJob of an entry: "<fullname>-<entry>". KEDA copies it
     into label values (scaledobject.keda.sh/name), so it must fit 63 characters. */}}
{{- define "gps.objectName" -}}
{{- $root := index . 0 }}{{- $entry := index . 1 }}
{{- $n := printf "%s-%s" (include "gps.fullname" $root) $entry }}
{{- if gt (len $n) 63 }}
{{- fail (printf "object name %q is longer than 63 characters: shorten the release name, fullnameOverride or the entry name %q" $n $entry) }}
{{- end }}
{{- $n }}
{{- end }}

{{/* Where KEDA dials the scaler. */}}
{{- define "gps.scalerAddress" -}}
{{- if .Values.keda.scalerAddress }}
{{- .Values.keda.scalerAddress }}
{{- else }}
{{- $svc := ternary (include "gps.headlessName" .) (include "gps.fullname" .) (eq .Values.keda.addressVia "headless") }}
{{- printf "%s.%s.svc.%s:%d" $svc .Release.Namespace .Values.keda.clusterDomain (int .Values.server.grpcPort) }}
{{- end }}
{{- end }}

{{/* Pool-config helpers ------------------------------------------------------------ */}}

{{/* Namespace of an inference entry: its own, else the release namespace. Written into
     config.yaml explicitly so the scaler and the ScaledObject agree. */}}
{{- define "gps.svcNamespace" -}}
{{- $root := index . 0 }}{{- $svc := index . 1 }}
{{- default $root.Release.Namespace $svc.namespace }}
{{- end }}

{{/* Namespace of a research ScaledJob. */}}
{{- define "gps.jobNamespace" -}}
{{- $root := index . 0 }}{{- $rc := index . 1 }}
{{- $sj := default dict $rc.scaledJob }}
{{- default $root.Release.Namespace $sj.namespace }}
{{- end }}

{{/* A key's value or a default, where 0/false/"" are real values (unlike `default`). */}}
{{- define "gps.get" -}}
{{- $m := index . 0 }}{{- $k := index . 1 }}{{- $d := index . 2 }}
{{- if and (kindIs "map" $m) (hasKey $m $k) (not (kindIs "invalid" (get $m $k))) }}
{{- get $m $k }}
{{- else }}
{{- $d }}
{{- end }}
{{- end }}

{{/* The label research pods carry so node accounting counts them as the pool's. */}}
{{- define "gps.poolLabel" -}}
{{- $cap := default dict .Values.pool.capacity }}
{{- $nodes := default dict $cap.nodes }}
{{- default "gpu-pool-scaler.io/pool" $nodes.poolLabel }}
{{- end }}

{{- define "gps.gpuResource" -}}
{{- $cap := default dict .Values.pool.capacity }}
{{- $nodes := default dict $cap.nodes }}
{{- default "nvidia.com/gpu" $nodes.resource }}
{{- end }}

{{- define "gps.usesNodes" -}}
{{- $cap := default dict .Values.pool.capacity }}
{{- if $cap.nodes }}true{{ end }}
{{- end }}

{{- define "gps.subtractForeignPods" -}}
{{- $cap := default dict .Values.pool.capacity }}
{{- $nodes := default dict $cap.nodes }}
{{- if $nodes.subtractForeignPods }}true{{ end }}
{{- end }}

{{/* Namespaces where the scaler discovers pods / EndpointSlices (one Role each). */}}
{{- define "gps.discoveryNamespaces" -}}
{{- $out := list }}
{{- range .Values.inference }}
{{- $t := default dict .targets }}
{{- if $t.kubernetes }}
{{- $out = append $out (default (include "gps.svcNamespace" (list $ .)) $t.kubernetes.namespace) }}
{{- end }}
{{- end }}
{{- $out | uniq | sortAlpha | join "," }}
{{- end }}

{{- define "gps.needsKubeAPI" -}}
{{- if or (include "gps.usesNodes" .) (include "gps.discoveryNamespaces" .) }}true{{ end }}
{{- end }}

{{/* Namespaces holding ScaledObjects/ScaledJobs (one TriggerAuthentication each). */}}
{{- define "gps.kedaNamespaces" -}}
{{- $out := list }}
{{- range .Values.inference }}
{{- $so := default dict .scaledObject }}
{{- if ne (include "gps.get" (list $so "enabled" true)) "false" }}
{{- $out = append $out (include "gps.svcNamespace" (list $ .)) }}
{{- end }}
{{- end }}
{{- range .Values.research }}
{{- $out = append $out (include "gps.jobNamespace" (list $ .)) }}
{{- end }}
{{- $out | uniq | sortAlpha | join "," }}
{{- end }}

{{/* The config file the scaler reads: pool-config keys only, chart keys stripped. */}}
{{- define "gps.config" -}}
{{- $server := dict "listenAddress" (.Values.server.listenAddress | default "0.0.0.0") "grpcPort" (int .Values.server.grpcPort) "metricsPort" (int .Values.server.metricsPort) }}
{{- if .Values.server.tls.enabled }}
{{- $tls := dict "certFile" "/var/run/gpu-pool-scaler/tls/tls.crt" "keyFile" "/var/run/gpu-pool-scaler/tls/tls.key" }}
{{- if .Values.server.tls.clientAuth }}
{{- $_ := set $tls "clientCAFile" "/var/run/gpu-pool-scaler/tls/ca.crt" }}
{{- end }}
{{- $_ := set $server "tls" $tls }}
{{- end }}
{{- $inference := list }}
{{- range .Values.inference }}
{{- $svc := omit . "scaledObject" }}
{{- $_ := set $svc "namespace" (include "gps.svcNamespace" (list $ .)) }}
{{- $inference = append $inference $svc }}
{{- end }}
{{- $research := list }}
{{- range .Values.research }}
{{- $research = append $research (omit . "scaledJob") }}
{{- end }}
{{- $cfg := dict "server" $server "pool" .Values.pool "scrape" (default dict .Values.scrape) "inference" $inference "research" $research }}
{{- toYaml $cfg }}
{{- end }}

{{/* Trigger metadata shared by ScaledObjects and ScaledJobs (all values strings). */}}
{{- define "gps.triggerCommon" -}}
scalerAddress: {{ include "gps.scalerAddress" . | quote }}
{{- if .Values.server.tls.enabled }}
enableTLS: "true"
{{- end }}
{{- if .Values.keda.unsafeSsl }}
unsafeSsl: "true"
{{- end }}
{{- end }}
