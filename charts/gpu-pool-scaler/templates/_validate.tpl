{{/*
Cross-field checks that values.schema.json cannot express. They mirror the scaler's own
config validators (scaler/config.py) so a bad value fails `helm template/install` with a
clear message instead of a CrashLooping scaler, plus chart-level rules (TLS wiring, PDB,
priorities, Job templates). Each message names the values key.
*/}}
{{- define "gps.validate" -}}
{{- $v := .Values }}
{{- $pool := default dict $v.pool }}
{{- if not $pool.name }}
{{- fail "pool.name is required: the pool's name, a DNS label such as shared-h100" }}
{{- end }}
{{- $cap := default dict $pool.capacity }}
{{- $hasGpus := and (hasKey $cap "gpus") (not (kindIs "invalid" $cap.gpus)) }}
{{- $hasNodes := and (hasKey $cap "nodes") (not (kindIs "invalid" $cap.nodes)) }}
{{- if eq $hasGpus $hasNodes }}
{{- fail "pool.capacity: set exactly one of 'gpus' (static) or 'nodes' (from Kubernetes); to switch a merged default off set the other to null" }}
{{- end }}
{{- if and (empty $v.inference) (empty $v.research) }}
{{- fail "nothing to scale: add at least one 'inference' or 'research' entry (see ci/minimal-values.yaml)" }}
{{- end }}

{{- /* scrape timing, with the scaler's defaults */}}
{{- $scrape := default dict $v.scrape }}
{{- $interval := float64 (include "gps.get" (list $scrape "intervalSeconds" 5)) }}
{{- $timeout := float64 (include "gps.get" (list $scrape "timeoutSeconds" 2)) }}
{{- $stale := float64 (include "gps.get" (list $scrape "staleAfterSeconds" 30)) }}
{{- if gt $timeout $interval }}
{{- fail (printf "scrape.timeoutSeconds (%v) must not exceed scrape.intervalSeconds (%v): a cycle would overrun" $timeout $interval) }}
{{- end }}
{{- if lt $stale $interval }}
{{- fail (printf "scrape.staleAfterSeconds (%v) must be at least scrape.intervalSeconds (%v): every sample would be stale" $stale $interval) }}
{{- end }}

{{- if eq (int $v.server.grpcPort) (int $v.server.metricsPort) }}
{{- fail (printf "server.grpcPort and server.metricsPort must differ (both %d)" (int $v.server.grpcPort)) }}
{{- end }}

{{- /* inference entries */}}
{{- $seen := dict }}
{{- range $i, $svc := $v.inference }}
{{- $where := printf "inference[%d] %q" $i $svc.name }}
{{- if hasKey $seen $svc.name }}
{{- fail (printf "inference: duplicate name %q (entries %s and %d)" $svc.name (get $seen $svc.name) $i) }}
{{- end }}
{{- $_ := set $seen $svc.name (toString $i) }}
{{- $min := int (include "gps.get" (list $svc "minReplicas" 1)) }}
{{- $max := int (include "gps.get" (list $svc "maxReplicas" 16)) }}
{{- if gt $min $max }}
{{- fail (printf "%s: minReplicas (%d) is greater than maxReplicas (%d)" $where $min $max) }}
{{- end }}
{{- $t := default dict $svc.targets }}
{{- if eq (empty $t.static) (empty $t.kubernetes) }}
{{- fail (printf "%s: targets: set exactly one of 'static' or 'kubernetes'" $where) }}
{{- end }}
{{- with $t.kubernetes }}
{{- if eq (empty .labelSelector) (empty .service) }}
{{- fail (printf "%s: targets.kubernetes: set exactly one of 'labelSelector' (pods) or 'service' (EndpointSlices)" $where) }}
{{- end }}
{{- end }}
{{- range $j, $addr := $t.static }}
{{- $port := regexFind "[0-9]+$" $addr }}
{{- if or (not $port) (lt (int $port) 1) (gt (int $port) 65535) }}
{{- fail (printf "%s: targets.static[%d] %q is not host:port" $where $j $addr) }}
{{- end }}
{{- end }}
{{- if hasKey $svc "thresholds" }}
{{- $th := default dict $svc.thresholds }}
{{- if not (or $th.waitingPerReplica $th.kvCacheUsage $th.runningPerReplica $th.tokensPerSecondPerReplica) }}
{{- fail (printf "%s: thresholds: at least one threshold must be > 0, or the service never scales" $where) }}
{{- end }}
{{- end }}
{{- $so := mustMergeOverwrite (deepCopy $v.keda.scaledObject) (default dict $svc.scaledObject) }}
{{- if and $so.fallback.enabled (not (kindIs "invalid" $so.fallback.replicas)) }}
{{- if gt (int $so.fallback.replicas) $max }}
{{- fail (printf "%s: scaledObject.fallback.replicas (%d) exceeds maxReplicas (%d)" $where (int $so.fallback.replicas) $max) }}
{{- end }}
{{- end }}
{{- end }}

{{- /* research entries */}}
{{- $seen = dict }}
{{- $gpuRes := include "gps.gpuResource" . }}
{{- range $i, $rc := $v.research }}
{{- $where := printf "research[%d] %q" $i $rc.name }}
{{- if hasKey $seen $rc.name }}
{{- fail (printf "research: duplicate name %q (entries %s and %d)" $rc.name (get $seen $rc.name) $i) }}
{{- end }}
{{- $_ := set $seen $rc.name (toString $i) }}
{{- $sj := default dict $rc.scaledJob }}
{{- $tpl := default dict $sj.jobTemplate }}
{{- $spec := default dict $tpl.spec }}
{{- if empty $spec.containers }}
{{- fail (printf "%s: scaledJob.jobTemplate.spec.containers is required: the research Job's pod template" $where) }}
{{- end }}
{{- if and $spec.restartPolicy (ne $spec.restartPolicy "Never") }}
{{- fail (printf "%s: scaledJob.jobTemplate.spec.restartPolicy must be Never (podFailurePolicy needs it), got %q" $where $spec.restartPolicy) }}
{{- end }}
{{- $gpus := 0 }}
{{- range $spec.containers }}
{{- $res := default dict .resources }}
{{- $lim := default dict $res.limits }}
{{- if hasKey $lim $gpuRes }}
{{- $gpus = add $gpus (int (get $lim $gpuRes)) }}
{{- end }}
{{- end }}
{{- if and (gt $gpus 0) (ne $gpus (int $rc.gpusPerJob)) }}
{{- fail (printf "%s: the Job's containers request %d %s but gpusPerJob is %d: the scaler would count slots wrong" $where $gpus $gpuRes (int $rc.gpusPerJob)) }}
{{- end }}
{{- range $j, $tr := $sj.extraTriggers }}
{{- if and $tr.metricType (ne $tr.metricType "AverageValue") }}
{{- fail (printf "%s: scaledJob.extraTriggers[%d].metricType must be AverageValue (ScaledJobs support no other), got %q" $where $j $tr.metricType) }}
{{- end }}
{{- end }}
{{- end }}

{{- /* TLS wiring */}}
{{- $tls := $v.server.tls }}
{{- if and $tls.enabled (not $tls.secretName) }}
{{- fail "server.tls.enabled needs server.tls.secretName: a kubernetes.io/tls Secret with tls.crt and tls.key" }}
{{- end }}
{{- if and $tls.clientAuth (not $tls.enabled) }}
{{- fail "server.tls.clientAuth (mTLS) needs server.tls.enabled" }}
{{- end }}
{{- $auth := $v.keda.auth }}
{{- if $auth.enabled }}
{{- if not $auth.secretName }}
{{- fail "keda.auth.enabled needs keda.auth.secretName: an existing Secret with the CA and client cert/key (never inlined in values)" }}
{{- end }}
{{- if not $tls.enabled }}
{{- fail "keda.auth.enabled makes KEDA dial TLS, but server.tls.enabled is false: enable TLS on the scaler too" }}
{{- end }}
{{- end }}
{{- if and $tls.clientAuth (not (and $auth.enabled $auth.tlsClientCertKey $auth.tlsClientKeyKey)) }}
{{- fail "server.tls.clientAuth (mTLS) needs keda.auth.enabled with tlsClientCertKey and tlsClientKeyKey, or KEDA has no client certificate to present" }}
{{- end }}

{{- /* chart-level rules */}}
{{- if and $v.podDisruptionBudget.enabled (not (kindIs "string" $v.podDisruptionBudget.minAvailable)) }}
{{- if ge (int $v.podDisruptionBudget.minAvailable) (int $v.replicaCount) }}
{{- fail (printf "podDisruptionBudget.minAvailable (%d) must be lower than replicaCount (%d), or node drains block forever; disable the PDB for a single replica" (int $v.podDisruptionBudget.minAvailable) (int $v.replicaCount)) }}
{{- end }}
{{- end }}
{{- $np := $v.networkPolicy }}
{{- if and $np.enabled $np.egress.enabled (include "gps.needsKubeAPI" .) (empty $np.egress.apiServer.cidrs) }}
{{- fail "networkPolicy.egress.enabled blocks the Kubernetes API, which node capacity / target discovery read: set networkPolicy.egress.apiServer.cidrs (e.g. the kubernetes Service's endpoints)" }}
{{- end }}
{{- $pc := $v.priorityClasses }}
{{- if le (int64 $pc.inference.value) (int64 $pc.research.value) }}
{{- fail (printf "priorityClasses.inference.value (%d) must be greater than priorityClasses.research.value (%d): inference must preempt research to take GPUs back" (int64 $pc.inference.value) (int64 $pc.research.value)) }}
{{- end }}
{{- if and (not $pc.create) (or (not $pc.inference.name) (not $pc.research.name)) }}
{{- fail "priorityClasses.create=false needs priorityClasses.inference.name and priorityClasses.research.name (existing PriorityClasses)" }}
{{- end }}
{{- end }}
