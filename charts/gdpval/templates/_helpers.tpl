{{/* Chart name, cut to 63 characters (a DNS label). */}}
{{- define "gdpval.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-qualified name; a release already called "gdpval..." is not repeated. */}}
{{- define "gdpval.fullname" -}}
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

{{- define "gdpval.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Selector labels. app.kubernetes.io/component=operator keeps the selector away from the pods the
operator itself creates (they also carry app.kubernetes.io/name=gdpval).
*/}}
{{- define "gdpval.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gdpval.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/* Labels of every object of the release. */}}
{{- define "gdpval.commonLabels" -}}
helm.sh/chart: {{ include "gdpval.chart" . }}
app.kubernetes.io/name: {{ include "gdpval.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gdpval
{{- end }}

{{/* Labels of the operator's own objects. */}}
{{- define "gdpval.labels" -}}
{{ include "gdpval.commonLabels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "gdpval.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gdpval.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* repository@digest, or repository:tag (tag defaults to appVersion). */}}
{{- define "gdpval.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The default sandbox image; its tag defaults to "full-" + appVersion (images/sandbox/Dockerfile). */}}
{{- define "gdpval.sandboxImage" -}}
{{- with .Values.sandboxImage }}
{{- if .digest }}
{{- printf "%s@%s" .repository .digest }}
{{- else }}
{{- printf "%s:%s" .repository (default (printf "full-%s" $.Chart.AppVersion) .tag) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Namespaces the operator watches, as a JSON list (empty when cluster-wide): the explicit list, or
the release namespace. RBAC and the operator's flags are both rendered from this one list.
*/}}
{{- define "gdpval.watchNamespaces" -}}
{{- if .Values.operator.clusterWide }}
{{- list | toJson }}
{{- else if .Values.operator.watchNamespaces }}
{{- .Values.operator.watchNamespaces | uniq | toJson }}
{{- else }}
{{- list .Release.Namespace | toJson }}
{{- end }}
{{- end }}

{{/*
Rules the operator needs in every namespace it watches: exactly the calls it makes (see
operator/gdpval/controller/effects/kube.py and kopf's watches), nothing wildcarded.
*/}}
{{- define "gdpval.operatorRules" -}}
# kopf lists and watches runs; the operator writes only their status (it adds no finalizer) and
# deletes a finished run whose spec.ttlSecondsAfterFinished is over.
- apiGroups: ["gdpval.io"]
  resources: ["gdpvalruns"]
  verbs: ["get", "list", "watch", "delete"]
- apiGroups: ["gdpval.io"]
  resources: ["gdpvalruns/status"]
  verbs: ["get", "patch"]
# Children carry blockOwnerDeletion: where OwnerReferencesPermissionEnforcement is on (OpenShift)
# the API server refuses them unless the creator may update the owner's finalizers.
- apiGroups: ["gdpval.io"]
  resources: ["gdpvalruns/finalizers", "gdpvalpools/finalizers"]
  verbs: ["update"]
# Pools of started sample pods: watched, their status written; the operator never changes a pool's spec.
- apiGroups: ["gdpval.io"]
  resources: ["gdpvalpools"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["gdpval.io"]
  resources: ["gdpvalpools/status"]
  verbs: ["get", "patch"]
# patch: a pod started ahead (spec.samples.startAhead) gets its go as an annotation, and its deadline; a pool's pod
# is claimed by a run (its labels, owner and claim).
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "delete", "patch"]
# patch: spec.suspend of a run's Job follows the run's.
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "watch", "create", "delete", "patch"]
# The run's ledger.
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "create", "patch"]
# The egress policy of each run's sample pods; patched when a restarted operator resolves the
# endpoints again.
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "create", "patch"]
# Read by name: a missing API-key Secret becomes a condition; the S3 credentials are used by the
# operator itself to read commit markers. Created: each run's and pool's sandbox-token Secret (owned by
# it) and each claimed pool pod's credentials (owned by the pod). Never listed, watched, updated or deleted.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "create"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
# A run labelled kueue.x-k8s.io/queue-name is queued whole as one Kueue Workload: the operator
# creates it, reads it by name each pass (no watch: Kueue may be absent), and writes its status
# (quota given back after an eviction, Finished at the end).
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads"]
  verbs: ["get", "create", "update", "patch"]
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads/status"]
  verbs: ["get", "update", "patch"]
{{- end }}

{{/*
Read-only discovery: kopf lists the namespaces it was given (without this it retries for about a
minute at every start before falling back) and watches CRDs, so a GdpvalRun CRD installed or
changed later is picked up without a restart. Names and schemas only, and the value of a Kueue WorkloadPriorityClass.
*/}}
{{- define "gdpval.discoveryRules" -}}
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["get", "list", "watch"]
# The value of a queued run's WorkloadPriorityClass (kueue.x-k8s.io/priority-class), copied into its Workload.
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloadpriorityclasses"]
  verbs: ["get"]
{{- end }}

{{/* Selector labels as a label-selector string, k=v,k=v (keys sorted). */}}
{{- define "gdpval.selectorString" -}}
{{- $pairs := list }}
{{- range $k, $v := include "gdpval.selectorLabels" . | fromYaml }}
{{- $pairs = append $pairs (printf "%s=%s" $k $v) }}
{{- end }}
{{- join "," $pairs }}
{{- end }}

{{/*
Metadata of the uninstall hook's objects: a Helm pre-delete hook, and an Argo CD PostDelete hook
(Argo CD ignores the Helm annotations when its own are present). Call with (dict "ctx" $ "weight" "N").
*/}}
{{- define "gdpval.hookMeta" -}}
labels:
  {{- include "gdpval.commonLabels" .ctx | nindent 2 }}
  app.kubernetes.io/component: uninstall
annotations:
  helm.sh/hook: pre-delete
  helm.sh/hook-weight: {{ .weight | quote }}
  helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
  argocd.argoproj.io/hook: PostDelete
  argocd.argoproj.io/hook-delete-policy: BeforeHookCreation,HookSucceeded
  argocd.argoproj.io/sync-wave: {{ .weight | quote }}
{{- end }}
