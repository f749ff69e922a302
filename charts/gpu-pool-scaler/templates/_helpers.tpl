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
{{- with .Values.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* `annotations:` of an object: its own (the dict passed) plus additionalAnnotations;
     nothing when both are empty. Use: {{- include "gps.annotations" (list $ $own) | nindent 2 }} */}}
{{- define "gps.annotations" -}}
{{- $root := index . 0 }}{{- $own := index . 1 }}
{{- $all := merge (deepCopy (default dict $own)) (default dict $root.Values.additionalAnnotations) }}
{{- with $all }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "gps.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gps.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* [registry/]repository(:tag|@digest). global.imageRegistry (or KEDA's spelling,
     global.image.registry) wins over image.registry: one switch for an air-gapped mirror;
     no registry = what the node resolves. */}}
{{- define "gps.image" -}}
{{- $g := default dict .Values.global }}
{{- $gImage := default dict $g.image }}
{{- $registry := default .Values.image.registry (default $gImage.registry $g.imageRegistry) | trimSuffix "/" }}
{{- $repo := ternary (printf "%s/%s" $registry .Values.image.repository) .Values.image.repository (ne $registry "") }}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" $repo .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repo $tag }}
{{- end }}
{{- end }}

{{/* binpackScheduler's objects (Deployment, ServiceAccount, ConfigMap, Lease) share this name. */}}
{{- define "gps.binpackSchedulerName" -}}
{{- printf "%s-scheduler" (include "gps.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* binpackScheduler's image: the upstream kube-scheduler of the cluster's own version
     unless a tag is given (`vX.Y.Z` of .Capabilities.KubeVersion, without a provider
     suffix such as `-eks-...`, which registry.k8s.io does not publish). */}}
{{- define "gps.binpackSchedulerImage" -}}
{{- $i := .Values.binpackScheduler.image }}
{{- $g := default dict .Values.global }}
{{- $gImage := default dict $g.image }}
{{- $registry := default $i.registry (default $gImage.registry $g.imageRegistry) | trimSuffix "/" }}
{{- $repo := ternary (printf "%s/%s" $registry $i.repository) $i.repository (ne $registry "") }}
{{- $tag := default (regexFind "^v[0-9]+\\.[0-9]+\\.[0-9]+" .Capabilities.KubeVersion.Version) $i.tag }}
{{- if $i.digest }}
{{- printf "%s@%s" $repo $i.digest }}
{{- else }}
{{- printf "%s:%s" $repo $tag }}
{{- end }}
{{- end }}

{{- define "gps.inferencePriorityClass" -}}
{{- default (printf "%s-inference" (include "gps.fullname" .)) .Values.priorityClasses.inference.name }}
{{- end }}

{{- define "gps.researchPriorityClass" -}}
{{- default (printf "%s-research" (include "gps.fullname" .)) .Values.priorityClasses.research.name }}
{{- end }}

{{/* Whether each research class gets its own PriorityClass (only when the chart creates them). */}}
{{- define "gps.researchPerClass" -}}
{{- $pc := .Values.priorityClasses }}
{{- if and $pc.create $pc.research.perClass }}true{{ end }}
{{- end }}

{{/* PriorityClass value per research class, as JSON {name: value}: ranked by `priority`,
     then by the work a preemption can lose (gpusPerJob x checkpointIntervalSeconds, whole
     seconds), then gpusPerJob, then name; the first at research.value, each next
     research.spread lower. The bench mirrors it (scaler.sim.kube.research_priorities;
     tests/test_chart.py checks they agree). Sorted as fixed-width strings: Helm has no
     sort by number. */}}
{{- define "gps.researchRanks" -}}
{{- $pc := .Values.priorityClasses.research }}
{{- $keys := list }}
{{- range $rc := .Values.research }}
{{- $prio := int64 (float64 (include "gps.get" (list $rc "priority" 0))) }}
{{- $ckpt := int64 (float64 (include "gps.get" (list $rc "checkpointIntervalSeconds" 0))) }}
{{- $gpus := int64 $rc.gpusPerJob }}
{{- $keys = append $keys (printf "%012d|%020d|%012d|%s" (sub 100000000000 $prio) (sub 10000000000000000 (mul $gpus $ckpt)) (sub 100000000000 $gpus) $rc.name) }}
{{- end }}
{{- $out := dict }}
{{- range $i, $k := sortAlpha $keys }}
{{- $_ := set $out (last (splitList "|" $k)) (sub (int64 $pc.value) (mul $i (int64 (default 10 $pc.spread)))) }}
{{- end }}
{{- toJson $out }}
{{- end }}

{{/* The PriorityClass name of a research class's pods (list $ $rc). */}}
{{- define "gps.researchPriorityClassOf" -}}
{{- $root := index . 0 }}{{- $rc := index . 1 }}
{{- if include "gps.researchPerClass" $root }}
{{- printf "%s-%s" (include "gps.researchPriorityClass" $root) $rc.name }}
{{- else }}
{{- include "gps.researchPriorityClass" $root }}
{{- end }}
{{- end }}

{{/* PriorityClass of the scaler pods: `priorityClassName`, else the chart's own class
     (when the chart creates classes), else none (cluster default). */}}
{{- define "gps.scalerPriorityClass" -}}
{{- if .Values.priorityClassName }}
{{- .Values.priorityClassName }}
{{- else if .Values.priorityClasses.create }}
{{- default (printf "%s-scaler" (include "gps.fullname" .)) .Values.priorityClasses.scaler.name }}
{{- end }}
{{- end }}

{{- define "gps.authName" -}}
{{- default (printf "%s-tls" (include "gps.fullname" .)) .Values.keda.auth.name }}
{{- end }}

{{- define "gps.clusterAuth" -}}
{{- if eq (default "TriggerAuthentication" .Values.keda.auth.kind) "ClusterTriggerAuthentication" }}true{{ end }}
{{- end }}

{{/* authenticationRef of the scaler trigger (TLS to the scaler), or nothing. */}}
{{- define "gps.authRef" -}}
{{- if .Values.keda.auth.enabled }}
authenticationRef:
  name: {{ include "gps.authName" . }}
  {{- if include "gps.clusterAuth" . }}
  kind: ClusterTriggerAuthentication
  {{- end }}
{{- end }}
{{- end }}

{{/* Name of the ScaledObject/ScaledJob of an entry: "<fullname>-<entry>". KEDA copies it
     into label values (scaledobject.keda.sh/name), so it must fit 63 characters.
     Args: root, entry name, values path of the entry (for the error). */}}
{{- define "gps.objectName" -}}
{{- $root := index . 0 }}{{- $entry := index . 1 }}
{{- $path := "entry" }}{{ if gt (len .) 2 }}{{ $path = index . 2 }}{{ end }}
{{- $n := printf "%s-%s" (include "gps.fullname" $root) $entry }}
{{- if gt (len $n) 63 }}
{{- fail (printf "%s.name: the object name %q is longer than 63 characters: shorten the entry name %q, the release name or fullnameOverride" $path $n $entry) }}
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

{{/* Namespace of a research class (its ScaledJob, Jobs, TriggerAuthentications): its
     own `namespace`, else the release namespace, like inference entries. */}}
{{- define "gps.jobNamespace" -}}
{{- $root := index . 0 }}{{- $rc := index . 1 }}
{{- default $root.Release.Namespace $rc.namespace }}
{{- end }}

{{/* Grace period of a research class's pods: the pod template's own, else
     scaledJob.job.terminationGracePeriodSeconds, else keda.scaledJob's. */}}
{{- define "gps.researchGrace" -}}
{{- $root := index . 0 }}{{- $rc := index . 1 }}
{{- $sj := mustMergeOverwrite (deepCopy $root.Values.keda.scaledJob) (default dict $rc.scaledJob) }}
{{- $tpl := default dict $sj.jobTemplate }}
{{- $spec := default dict $tpl.spec }}
{{- if and (hasKey $spec "terminationGracePeriodSeconds") (not (kindIs "invalid" $spec.terminationGracePeriodSeconds)) }}
{{- int $spec.terminationGracePeriodSeconds }}
{{- else }}
{{- int $sj.job.terminationGracePeriodSeconds }}
{{- end }}
{{- end }}

{{/* The longest coldStartSeconds of the inference services (the scaler's default 180
     where unset) and the service: "seconds,name" (0 and "" without services). */}}
{{- define "gps.maxColdStart" -}}
{{- $max := 0.0 }}{{- $where := "" }}
{{- range .Values.inference }}
{{- $c := float64 (include "gps.get" (list . "coldStartSeconds" 180)) }}
{{- if gt $c $max }}{{ $max = $c }}{{ $where = .name }}{{ end }}
{{- end }}
{{- printf "%g,%s" $max $where }}
{{- end }}

{{/* The longest research grace period and the class it comes from: "seconds,path". */}}
{{- define "gps.maxResearchGrace" -}}
{{- $max := -1 }}{{- $where := "" }}
{{- range $i, $rc := .Values.research }}
{{- $g := int (include "gps.researchGrace" (list $ $rc)) }}
{{- if gt $g $max }}
{{- $max = $g }}
{{- $where = printf "research[%d] %q" $i $rc.name }}
{{- end }}
{{- end }}
{{- if ge $max 0 }}{{ printf "%d,%s" $max $where }}{{ end }}
{{- end }}

{{/* A research class's work-queue settings: researchQueue (chart-wide defaults) deep-merged
     with the class's `queue`, as JSON (use: fromJson). */}}
{{- define "gps.queue" -}}
{{- $root := index . 0 }}{{- $rc := index . 1 }}
{{- mustMergeOverwrite (deepCopy $root.Values.researchQueue) (deepCopy (default dict $rc.queue)) | toJson }}
{{- end }}

{{/* "true" when the scaler reads this queue itself: through a Secret mounted in its pod
     (`scaler.secretName`), else the workers' Secret through the API (`scaler.readWorkerSecret`).
     The class's ScaledJob then has the scaler's trigger alone. Argument: the merged queue
     (gps.queue). */}}
{{- define "gps.scalerReadsQueue" -}}
{{- if and .enabled (or (.scaler).secretName (.scaler).readWorkerSecret) }}true{{ end }}
{{- end }}

{{/* "true" when the scaler reads this queue's URL from a Secret mounted in its pod. */}}
{{- define "gps.scalerQueueFile" -}}
{{- if and .enabled (.scaler).secretName }}true{{ end }}
{{- end }}

{{/* "true" when the scaler reads the workers' Secret through the Kubernetes API. */}}
{{- define "gps.scalerQueueSecret" -}}
{{- if and (include "gps.scalerReadsQueue" .) (not (include "gps.scalerQueueFile" .)) }}true{{ end }}
{{- end }}

{{/* "ns=secret,ns=secret": the workers' Secrets the scaler reads through the API. */}}
{{- define "gps.queueSecretRefs" -}}
{{- $out := list }}
{{- range .Values.research }}
{{- $q := include "gps.queue" (list $ .) | fromJson }}
{{- if include "gps.scalerQueueSecret" $q }}
{{- $out = append $out (printf "%s=%s" (include "gps.jobNamespace" (list $ .)) $q.redis.secretName) }}
{{- end }}
{{- end }}
{{- join "," ($out | uniq) }}
{{- end }}

{{/* Where the scaler's pod mounts a class's queue URL Secret. Argument: the class name. */}}
{{- define "gps.queueUrlDir" -}}
/var/run/gpu-pool-scaler/queue/{{ . }}
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

{{/* Namespaces whose research pods the scaler watches for the measured give-back
     (pool.giveBack.namespaces; one read-only Role on pods each), comma-joined: only with
     capacity from nodes, giveBack.learn not false and subtractForeignPods off (with it the
     ClusterRole reads every pod already). The user's pool.giveBack.namespaces wins; else
     the research classes' Job namespaces, unique and sorted. Mirrors the scaler's
     research_watch_namespaces (scaler/ingest/capacity.py). */}}
{{- define "gps.giveBackNamespaces" -}}
{{- $gb := default dict .Values.pool.giveBack }}
{{- if and (include "gps.usesNodes" .) (not (include "gps.subtractForeignPods" .)) (ne (include "gps.get" (list $gb "learn" true)) "false") }}
{{- $out := list }}
{{- if hasKey $gb "namespaces" }}
{{- $out = default list $gb.namespaces }}
{{- else }}
{{- range .Values.research }}
{{- $out = append $out (include "gps.jobNamespace" (list $ .)) }}
{{- end }}
{{- end }}
{{- $out | uniq | sortAlpha | join "," }}
{{- end }}
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

{{/* The scaler reads back KEDA's HPAs (server.hpaCheck; scaler/app.py `_hpa_enabled`):
     `on`, or `auto` when the config already talks to Kubernetes. */}}
{{- define "gps.hpaCheck" -}}
{{- $mode := default "auto" .Values.server.hpaCheck }}
{{- if or (eq $mode "on") (and (eq $mode "auto") (or (include "gps.usesNodes" .) (include "gps.discoveryNamespaces" .))) }}true{{ end }}
{{- end }}

{{/* Namespaces of the inference services (the HPA check lists HPAs there). */}}
{{- define "gps.inferenceNamespaces" -}}
{{- $out := list }}
{{- range .Values.inference }}
{{- $out = append $out (include "gps.svcNamespace" (list $ .)) }}
{{- end }}
{{- $out | uniq | sortAlpha | join "," }}
{{- end }}

{{/* The ConfigMap holding the policy memory (server.state), empty when off. */}}
{{- define "gps.stateConfigMap" -}}
{{- $st := default dict .Values.server.state }}
{{- if ne (include "gps.get" (list $st "enabled" true)) "false" }}
{{- default (printf "%s-state" (include "gps.fullname" .)) $st.configMapName }}
{{- end }}
{{- end }}

{{- define "gps.needsKubeAPI" -}}
{{- if or (include "gps.usesNodes" .) (include "gps.discoveryNamespaces" .) (include "gps.hpaCheck" .) (include "gps.stateConfigMap" .) (include "gps.queueSecretRefs" .) }}true{{ end }}
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
{{- $server := dict "listenAddress" (.Values.server.listenAddress | default "0.0.0.0") "grpcPort" (int .Values.server.grpcPort) "metricsPort" (int .Values.server.metricsPort) "hpaCheck" (default "auto" .Values.server.hpaCheck) "hpaCheckSeconds" .Values.server.hpaCheckSeconds }}
{{- with include "gps.stateConfigMap" . }}
{{- $_ := set $server "stateConfigMap" (printf "%s/%s" $.Release.Namespace .) }}
{{- $_ := set $server "stateWriteSeconds" (default 60 ($.Values.server.state).writeSeconds) }}
{{- end }}
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
{{- $r := omit . "scaledJob" "namespace" "queue" }}
{{- $q := include "gps.queue" (list $ .) | fromJson }}
{{- if include "gps.scalerReadsQueue" $q }}
{{- $rq := dict "prefix" $q.prefix }}
{{- if include "gps.scalerQueueFile" $q }}
{{- $_ := set $rq "urlFile" (printf "%s/url" (include "gps.queueUrlDir" .name)) }}
{{- else }}
{{- /* The workers' Secret, read through the API (the Role in rbac.yaml names it). */}}
{{- $sec := dict "namespace" (include "gps.jobNamespace" (list $ .)) "name" $q.redis.secretName "passwordKey" $q.redis.passwordKey }}
{{- with $q.redis.urlKey }}{{ $_ := set $sec "urlKey" . }}{{ end }}
{{- with $q.redis.usernameKey }}{{ $_ := set $sec "usernameKey" . }}{{ end }}
{{- $_ := set $rq "secret" $sec }}
{{- $_ := set $rq "address" $q.redis.address }}
{{- end }}
{{- /* The chart builds the workers' URL on databaseIndex (no redis.urlKey): the scaler
       refuses a URL on another database, where the queue would look empty. */}}
{{- if not $q.redis.urlKey }}
{{- $_ := set $rq "database" (int $q.redis.databaseIndex) }}
{{- end }}
{{- $_ := set $r "queue" $rq }}
{{- end }}
{{- $research = append $research $r }}
{{- end }}
{{- /* adaptiveReserve.leadTimeSeconds unset: cover a replica's arrival through research,
       the longest research grace period (a preempted research pod may hold its GPUs that
       long) + the longest cold start, at least the scaler's 300. The same lead as the
       forecast's; bench (coding week): 85.8 % of the oracle's harvest against 84.5 % with
       the grace alone, the other traces identical (docs/bench.md). */}}
{{- $pool := deepCopy .Values.pool }}
{{- $ar := default dict $pool.adaptiveReserve }}
{{- $maxGrace := include "gps.maxResearchGrace" . }}
{{- if and $ar.enabled (not (hasKey $ar "leadTimeSeconds")) $maxGrace }}
{{- $cold := float64 (first (splitList "," (include "gps.maxColdStart" .))) }}
{{- $_ := set $ar "leadTimeSeconds" (maxf 300 (addf (first (splitList "," $maxGrace)) $cold)) }}
{{- $_ := set $pool "adaptiveReserve" $ar }}
{{- end }}
{{- /* forecast.researchGraceSeconds unset: the research pods' real grace period. */}}
{{- $fc := default dict $pool.forecast }}
{{- if and $fc.enabled (not (hasKey $fc "researchGraceSeconds")) $maxGrace }}
{{- $_ := set $fc "researchGraceSeconds" (int (first (splitList "," $maxGrace))) }}
{{- $_ := set $pool "forecast" $fc }}
{{- end }}
{{- /* giveBack.namespaces unset: the research Jobs' namespaces (the scaler watches their
       research pods there, with the Roles of rbac.yaml). */}}
{{- $gb := default dict $pool.giveBack }}
{{- with include "gps.giveBackNamespaces" . }}
{{- if not (hasKey $gb "namespaces") }}
{{- $_ := set $gb "namespaces" (splitList "," .) }}
{{- $_ := set $pool "giveBack" $gb }}
{{- end }}
{{- end }}
{{- $cfg := dict "server" $server "pool" $pool "scrape" (default dict .Values.scrape) "inference" $inference "research" $research }}
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

{{/* A decimal (at most 3 places, schema-checked) as the API server's canonical Quantity:
     "0.05" -> "50m", "1" -> "1", "0" -> "0". KEDA's operator writes ScaledObjects back in
     canonical form; any other spelling makes it the owner of the field and the next
     server-side-apply `helm upgrade` fails with a conflict (seen in cluster/e2e.py). */}}
{{- define "gps.quantity" -}}
{{- $milli := int (round (mulf (float64 (toString .)) 1000) 0) }}
{{- if eq (mod $milli 1000) 0 }}{{ div $milli 1000 }}{{ else }}{{ $milli }}m{{ end }}
{{- end }}
