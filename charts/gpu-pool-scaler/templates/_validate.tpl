{{/*
Cross-field checks that values.schema.json cannot express. They mirror the scaler's own
config validators (scaler/config.py) so a bad value fails `helm template/install` with a
clear message instead of a CrashLooping scaler, plus chart-level rules (TLS wiring, PDB,
priorities, Job templates, work queues). Every message starts with the values path it is
about (`inference[0].minReplicas: ...`), so the reader knows what to edit.
Rendered by templates/validate.yaml, which helm renders before the other templates.
*/}}
{{- define "gps.validate" -}}
{{- $v := .Values }}
{{- $pool := default dict $v.pool }}
{{- if not $pool.name }}
{{- fail "pool.name: required: the pool's name, a DNS label such as shared-h100" }}
{{- end }}
{{- $cap := default dict $pool.capacity }}
{{- $hasGpus := and (hasKey $cap "gpus") (not (kindIs "invalid" $cap.gpus)) }}
{{- $hasNodes := and (hasKey $cap "nodes") (not (kindIs "invalid" $cap.nodes)) }}
{{- if eq $hasGpus $hasNodes }}
{{- fail "pool.capacity: set exactly one of 'gpus' (static) or 'nodes' (from Kubernetes); to switch a merged default off set the other to null" }}
{{- end }}
{{- if and (empty $v.inference) (empty $v.research) }}
{{- fail "inference, research: nothing to scale: add at least one 'inference' or 'research' entry (see ci/minimal-values.yaml)" }}
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
{{- $late := float64 (include "gps.get" (list $scrape "lateAnswerSeconds" 0)) }}
{{- if gt (addf $timeout $late) $stale }}
{{- fail (printf "scrape.timeoutSeconds + scrape.lateAnswerSeconds (%v + %v) must not exceed scrape.staleAfterSeconds (%v): an answer that late would be stale data already" $timeout $late $stale) }}
{{- end }}

{{- if and $v.binpackScheduler.enabled (eq $v.binpackScheduler.name "default-scheduler") }}
{{- fail "binpackScheduler.name: must not be default-scheduler, the cluster's own scheduler: two schedulers of one name both place its pods; keep gpu-binpack or pick another name" }}
{{- end }}

{{- if eq (int $v.server.grpcPort) (int $v.server.metricsPort) }}
{{- fail (printf "server.metricsPort: must differ from server.grpcPort (both %d)" (int $v.server.grpcPort)) }}
{{- end }}

{{- /* inference entries */}}
{{- $seen := dict }}
{{- range $i, $svc := $v.inference }}
{{- $at := printf "inference[%d]" $i }}
{{- if hasKey $seen $svc.name }}
{{- fail (printf "%s.name: duplicate name %q (also %s.name)" $at $svc.name (get $seen $svc.name)) }}
{{- end }}
{{- $_ := set $seen $svc.name $at }}
{{- $_ := include "gps.objectName" (list $ $svc.name $at) }}
{{- $min := int (include "gps.get" (list $svc "minReplicas" 1)) }}
{{- $max := int (include "gps.get" (list $svc "maxReplicas" 16)) }}
{{- if gt $min $max }}
{{- fail (printf "%s.minReplicas (%d) is greater than %s.maxReplicas (%d)" $at $min $at $max) }}
{{- end }}
{{- $so := mustMergeOverwrite (deepCopy $v.keda.scaledObject) (default dict $svc.scaledObject) }}
{{- $soEnabled := ne (include "gps.get" (list $so "enabled" true)) "false" }}
{{- if and $soEnabled (eq $min 0) }}
{{- fail (printf "%s.minReplicas: 0 is not supported: at zero pods there is no engine whose metrics the scaler could read, and the ScaledObject has no second trigger (e.g. on the request gateway) to wake the service, so it would stay at zero; use 1 or more (scale-from-zero is future work)" $at) }}
{{- end }}
{{- if and (kindIs "map" $svc.slo) (eq (toString (default "vllm" $svc.engine)) "tgi") }}
{{- fail (printf "%s.slo: engine tgi exports no time-to-first-token histogram to measure the objective on (vLLM and SGLang do); remove slo or use the queue/KV thresholds" $at) }}
{{- end }}
{{- $t := default dict $svc.targets }}
{{- if eq (empty $t.static) (empty $t.kubernetes) }}
{{- fail (printf "%s.targets: set exactly one of 'static' or 'kubernetes'" $at) }}
{{- end }}
{{- with $t.kubernetes }}
{{- if eq (empty .labelSelector) (empty .service) }}
{{- fail (printf "%s.targets.kubernetes: set exactly one of 'labelSelector' (pods) or 'service' (EndpointSlices)" $at) }}
{{- end }}
{{- end }}
{{- range $j, $addr := $t.static }}
{{- $port := regexFind "[0-9]+$" $addr }}
{{- if or (not $port) (lt (int $port) 1) (gt (int $port) 65535) }}
{{- fail (printf "%s.targets.static[%d]: %q is not host:port" $at $j $addr) }}
{{- end }}
{{- end }}
{{- if hasKey $svc "thresholds" }}
{{- $th := default dict $svc.thresholds }}
{{- if not (or $th.waitingPerReplica $th.kvCacheUsage $th.runningPerReplica $th.tokensPerSecondPerReplica) }}
{{- fail (printf "%s.thresholds: at least one threshold must be > 0, or the service never scales" $at) }}
{{- end }}
{{- end }}
{{- if and $so.fallback.enabled (not (kindIs "invalid" $so.fallback.replicas)) }}
{{- if gt (int $so.fallback.replicas) $max }}
{{- fail (printf "%s.scaledObject.fallback.replicas (%d) exceeds %s.maxReplicas (%d)" $at (int $so.fallback.replicas) $at $max) }}
{{- end }}
{{- end }}
{{- end }}

{{- /* research entries */}}
{{- $seen = dict }}
{{- $gpuRes := include "gps.gpuResource" . }}
{{- $tls := $v.server.tls }}
{{- $auth := $v.keda.auth }}
{{- range $i, $rc := $v.research }}
{{- $at := printf "research[%d]" $i }}
{{- if hasKey $seen $rc.name }}
{{- fail (printf "%s.name: duplicate name %q (also %s.name)" $at $rc.name (get $seen $rc.name)) }}
{{- end }}
{{- $_ := set $seen $rc.name $at }}
{{- $_ := include "gps.objectName" (list $ $rc.name $at) }}
{{- $sjValues := default dict $rc.scaledJob }}
{{- if hasKey $sjValues "namespace" }}
{{- fail (printf "%s.scaledJob.namespace has moved to %s.namespace (one place for a class's namespace, like inference[].namespace): move the value there" $at $at) }}
{{- end }}
{{- $sj := mustMergeOverwrite (deepCopy $v.keda.scaledJob) $sjValues }}
{{- $tpl := default dict $sj.jobTemplate }}
{{- $spec := default dict $tpl.spec }}
{{- if empty $spec.containers }}
{{- fail (printf "%s.scaledJob.jobTemplate.spec.containers: required: the research Job's pod template" $at) }}
{{- end }}
{{- if and $spec.restartPolicy (ne $spec.restartPolicy "Never") }}
{{- fail (printf "%s.scaledJob.jobTemplate.spec.restartPolicy must be Never (podFailurePolicy needs it), got %q" $at $spec.restartPolicy) }}
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
{{- fail (printf "%s.gpusPerJob (%d) disagrees with the Job's containers, which request %d %s: the scaler would count slots wrong" $at (int $rc.gpusPerJob) $gpus $gpuRes) }}
{{- end }}
{{- range $j, $tr := $sj.extraTriggers }}
{{- if hasKey $tr "metricType" }}
{{- fail (printf "%s.scaledJob.extraTriggers[%d]: remove metricType (%q): KEDA's operator refuses a ScaledJob with any trigger metricType (\"Cannot set metricType in ScaledJob triggers\")" $at $j (toString $tr.metricType)) }}
{{- end }}
{{- end }}

{{- /* work queue */}}
{{- $q := include "gps.queue" (list $ $rc) | fromJson }}
{{- if $q.enabled }}
{{- $redis := default dict $q.redis }}
{{- if not $redis.address }}
{{- fail (printf "%s.queue.redis.address: required with %s.queue.enabled: the Redis of the work queue, host:port (or set researchQueue.redis.address for every class)" $at $at) }}
{{- end }}
{{- if not (and $redis.secretName $redis.passwordKey) }}
{{- fail (printf "%s.queue.redis.secretName and .passwordKey: required with %s.queue.enabled: an existing Secret in namespace %s whose key holds the Redis password (the worker reads it, and the scaler or KEDA's redis trigger; never inlined in values)" $at $at (include "gps.jobNamespace" (list $ $rc))) }}
{{- end }}
{{- $calc := default "min" $sj.scalingStrategy.multipleScalersCalculation }}
{{- if ne $calc "min" }}
{{- fail (printf "%s.scaledJob.scalingStrategy.multipleScalersCalculation must be min with a work queue, got %q: Jobs = min(queued items, research slots); %s would start Jobs for queued items on GPUs the scaler did not give to research" $at $calc $calc) }}
{{- end }}
{{- $strategy := default "default" $sj.scalingStrategy.strategy }}
{{- if has $strategy (list "accurate" "eager") }}
{{- fail (printf "%s.scaledJob.scalingStrategy.strategy %q does not fit the work queue: the scaler reports TOTAL slots (running Jobs included), which only the default strategy subtracts running Jobs from; %s would start Jobs beyond the slots (their workers then exit at once). Use default" $at $strategy $strategy) }}
{{- end }}
{{- $w := default dict $q.worker }}
{{- $cname := default "" $w.container }}
{{- $found := false }}
{{- range $j, $c := $spec.containers }}
{{- if or (eq $c.name $cname) (and (eq $cname "") (eq $j 0)) }}
{{- $found = true }}
{{- if empty $c.command }}
{{- fail (printf "%s.scaledJob.jobTemplate.spec.containers[%d].command: required with %s.queue.enabled: the chart runs it as `gpu-pool-worker ... -- COMMAND ARGS`, and an image's ENTRYPOINT cannot be read at template time" $at $j $at) }}
{{- end }}
{{- end }}
{{- end }}
{{- if not $found }}
{{- fail (printf "%s.queue.worker.container: no container named %q in %s.scaledJob.jobTemplate.spec.containers" $at $cname $at) }}
{{- end }}
{{- $grace := int (include "gps.researchGrace" (list $ $rc)) }}
{{- $report := int $w.reportSeconds }}
{{- if le $grace $report }}
{{- fail (printf "%s.scaledJob.job.terminationGracePeriodSeconds (%d) must exceed %s.queue.worker.reportSeconds (%d): the worker passes SIGTERM on, gives the command the difference to checkpoint, then needs the rest to return the item" $at $grace $at $report) }}
{{- end }}
{{- if $tls.enabled }}
{{- $wtls := default $auth.secretName $w.tlsSecretName }}
{{- if include "gps.clusterAuth" $ }}{{ $wtls = default "" $w.tlsSecretName }}{{ end }}
{{- if not $wtls }}
{{- fail (printf "%s.queue.worker.tlsSecretName: required with server.tls.enabled and keda.auth.kind ClusterTriggerAuthentication: the worker asks the scaler for slots over TLS and needs the CA (and, for mTLS, a client cert) from a Secret in namespace %s; KEDA's Secret lives in KEDA's namespace, which pods cannot mount" $at (include "gps.jobNamespace" (list $ $rc))) }}
{{- end }}
{{- if not $auth.caCertKey }}
{{- fail (printf "%s.queue: keda.auth.caCertKey is empty, so the worker has no CA to verify the scaler with; set it (the worker reads the same keys as KEDA)" $at) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{- /* give-back time vs the adaptive reserve's lead time */}}
{{- $ar := default dict $pool.adaptiveReserve }}
{{- $maxGrace := include "gps.maxResearchGrace" . }}
{{- if and $ar.enabled $maxGrace (hasKey $ar "leadTimeSeconds") }}
{{- $g := int (first (splitList "," $maxGrace)) }}
{{- $gAt := last (splitList "," $maxGrace) }}
{{- if lt (float64 $ar.leadTimeSeconds) (float64 $g) }}
{{- fail (printf "pool.adaptiveReserve.leadTimeSeconds (%v) is shorter than the research grace period of %s (%d s): a preempted research pod may hold its GPUs that long, so the reserve must cover inference growth over at least %d s. Raise leadTimeSeconds, lower the grace period, or leave leadTimeSeconds unset (the chart then uses the longest grace period)" $ar.leadTimeSeconds $gAt $g $g) }}
{{- end }}
{{- end }}

{{- $fc := default dict $pool.forecast }}
{{- if and $fc.enabled $maxGrace (hasKey $fc "researchGraceSeconds") }}
{{- $g := int (first (splitList "," $maxGrace)) }}
{{- if lt (float64 $fc.researchGraceSeconds) (float64 $g) }}
{{- fail (printf "pool.forecast.researchGraceSeconds (%v) is shorter than the research grace period of %s (%d s): the forecast would plan scale-ups too late. Set it to at least %d, or leave it unset (the chart then uses the longest grace period)" $fc.researchGraceSeconds (last (splitList "," $maxGrace)) $g $g) }}
{{- end }}
{{- end }}

{{- /* TLS wiring: KEDA must be able to verify (and, for mTLS, present) certificates */}}
{{- if and $tls.enabled (not $tls.secretName) }}
{{- fail "server.tls.secretName: required with server.tls.enabled: a kubernetes.io/tls Secret with tls.crt and tls.key (+ ca.crt for clientAuth)" }}
{{- end }}
{{- if and $tls.clientAuth (not $tls.enabled) }}
{{- fail "server.tls.clientAuth (mTLS) needs server.tls.enabled" }}
{{- end }}
{{- if $auth.enabled }}
{{- if not $auth.secretName }}
{{- fail "keda.auth.secretName: required with keda.auth.enabled: an existing Secret with the CA and client cert/key (never inlined in values)" }}
{{- end }}
{{- if not $tls.enabled }}
{{- fail "keda.auth.enabled makes KEDA dial TLS, but server.tls.enabled is false: enable TLS on the scaler too" }}
{{- end }}
{{- end }}
{{- if and $tls.enabled (not $v.keda.unsafeSsl) (not (and $auth.enabled $auth.caCertKey)) }}
{{- fail "keda.auth: server.tls.enabled, but KEDA has no CA to verify the scaler's certificate (a cluster-internal name no public CA signs), so every call would fail the handshake: set keda.auth.enabled=true, keda.auth.secretName (an existing Secret with ca.crt; kind TriggerAuthentication: in each namespace with ScaledObjects/ScaledJobs, kind ClusterTriggerAuthentication: once, in KEDA's namespace) and keep keda.auth.caCertKey; keda.unsafeSsl=true skips verification (testing only)" }}
{{- end }}
{{- if and $tls.clientAuth (not (and $auth.enabled $auth.tlsClientCertKey $auth.tlsClientKeyKey)) }}
{{- fail "keda.auth: server.tls.clientAuth (mTLS) needs keda.auth.enabled with tlsClientCertKey and tlsClientKeyKey, or KEDA has no client certificate to present" }}
{{- end }}

{{- /* chart-level rules */}}
{{- $pdb := $v.podDisruptionBudget }}
{{- if $pdb.enabled }}
{{- $hasMin := not (kindIs "invalid" $pdb.minAvailable) }}
{{- $hasMax := not (kindIs "invalid" $pdb.maxUnavailable) }}
{{- if eq $hasMin $hasMax }}
{{- fail "podDisruptionBudget: set exactly one of minAvailable or maxUnavailable (set the other to null)" }}
{{- end }}
{{- if and $hasMin (not (kindIs "string" $pdb.minAvailable)) }}
{{- if ge (int $pdb.minAvailable) (int $v.replicaCount) }}
{{- fail (printf "podDisruptionBudget.minAvailable (%d) must be lower than replicaCount (%d), or node drains block forever; use maxUnavailable: 1 instead" (int $pdb.minAvailable) (int $v.replicaCount)) }}
{{- end }}
{{- end }}
{{- if and $hasMax (not (kindIs "string" $pdb.maxUnavailable)) (eq (int $pdb.maxUnavailable) 0) }}
{{- fail "podDisruptionBudget.maxUnavailable: 0 blocks every node drain forever; use 1" }}
{{- end }}
{{- end }}
{{- $np := $v.networkPolicy }}
{{- if and $np.enabled $np.egress.enabled (include "gps.needsKubeAPI" .) (empty $np.egress.apiServer.cidrs) }}
{{- fail "networkPolicy.egress.apiServer.cidrs: required with networkPolicy.egress.enabled: node capacity / target discovery read the Kubernetes API (e.g. the kubernetes Service's endpoints)" }}
{{- end }}
{{- $pc := $v.priorityClasses }}
{{- if le (int64 $pc.inference.value) (int64 $pc.research.value) }}
{{- fail (printf "priorityClasses.inference.value (%d) must be greater than priorityClasses.research.value (%d): inference must preempt research to take GPUs back" (int64 $pc.inference.value) (int64 $pc.research.value)) }}
{{- end }}
{{- if and (not $pc.create) (or (not $pc.inference.name) (not $pc.research.name)) }}
{{- fail "priorityClasses.inference.name and priorityClasses.research.name: required with priorityClasses.create=false (existing PriorityClasses)" }}
{{- end }}
{{- end }}
