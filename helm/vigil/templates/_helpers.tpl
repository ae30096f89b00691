{{/*
Naming and labelling helpers shared by every template.
*/}}

{{/* The chart name, overridable with nameOverride. */}}
{{- define "vigil.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every object name: the release name, plus the chart name unless the release name
already contains it. Truncated to 63 characters (DNS label limit); suffixes are kept short.
*/}}
{{- define "vigil.fullname" -}}
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

{{/* Chart name and version, for the helm.sh/chart label. */}}
{{- define "vigil.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "vigil.labels" -}}
helm.sh/chart: {{ include "vigil.chart" . }}
{{ include "vigil.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: vigil
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The labels that identify this release's objects; never change them (selectors are immutable). */}}
{{- define "vigil.selectorLabels" -}}
app.kubernetes.io/name: {{ include "vigil.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Selector labels of the operator pods. */}}
{{- define "vigil.operator.selectorLabels" -}}
{{ include "vigil.selectorLabels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{/* Selector labels of the separate watchdog pods. */}}
{{- define "vigil.watchdog.selectorLabels" -}}
{{ include "vigil.selectorLabels" . }}
app.kubernetes.io/component: watchdog
{{- end }}

{{/* Selector labels of the bundled PostgreSQL pod. */}}
{{- define "vigil.postgresql.selectorLabels" -}}
{{ include "vigil.selectorLabels" . }}
app.kubernetes.io/component: postgresql
{{- end }}

{{/* The operator's ServiceAccount name. */}}
{{- define "vigil.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "vigil.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The operator image reference: the digest pins it when set, else the tag (default appVersion). */}}
{{- define "vigil.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Name of the bundled PostgreSQL's StatefulSet, Service and Secret. */}}
{{- define "vigil.postgresql.fullname" -}}
{{- printf "%s-postgresql" (include "vigil.fullname" . | trunc 52 | trimSuffix "-") }}
{{- end }}

{{/*
Where VIGIL_HISTORY_DSN comes from, as a dict {name, key}, or an empty dict when the DSN in the
ConfigMap is used. history.existingSecret and postgresql.enabled are mutually exclusive.
*/}}
{{- define "vigil.historySecretRef" -}}
{{- $bundled := include "vigil.postgresql.enabled" . }}
{{- if and .Values.history.existingSecret (eq (toString .Values.postgresql.enabled) "true") }}
{{- fail "history.existingSecret and postgresql.enabled are mutually exclusive: choose one source for the history DSN" }}
{{- end }}
{{- if .Values.history.existingSecret }}
{{- dict "name" .Values.history.existingSecret "key" .Values.history.existingSecretKey | toJson }}
{{- else if $bundled }}
{{- dict "name" (include "vigil.postgresql.fullname" .) "key" "dsn" | toJson }}
{{- else if gt (int .Values.replicaCount) 1 }}
{{- fail "history: with replicaCount > 1 every replica must write one shared history, or a failover loses rows: keep postgresql.enabled at auto (or true), set history.existingSecret, or use replicaCount 1 (SQLite, on history.storage.existingClaim to survive restarts)" }}
{{- else }}
{{- dict | toJson }}
{{- end }}
{{- end }}

{{/*
Whether the bundled PostgreSQL is deployed: "true" or empty. postgresql.enabled "auto" (the
default) deploys it when more than one replica runs and no external DSN is given, because a
per-pod SQLite file would split the history between replicas and lose a dead leader's rows.
*/}}
{{- define "vigil.postgresql.enabled" -}}
{{- $setting := toString .Values.postgresql.enabled }}
{{- if eq $setting "auto" }}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.history.existingSecret) }}true{{ end }}
{{- else if eq $setting "true" }}true
{{- end }}
{{- end }}

{{/*
Where VIGIL_QUEUE_DSN comes from, as a dict {name, key}, or an empty dict when the volume tier is
off (queue.enabled false). Exactly one source: queue.existingSecret; queue.dsn, kept in the chart's
own Secret <fullname>-queue; or queue.useHistoryDatabase, the bundled PostgreSQL's Secret (key
queueDsn, a libpq URL: the history's `dsn` key is a SQLAlchemy URL the queue store cannot read).
*/}}
{{- define "vigil.queueSecretRef" -}}
{{- $queue := .Values.queue }}
{{- if not $queue.enabled }}
{{- dict | toJson }}
{{- else }}
{{- $sources := 0 }}
{{- if $queue.existingSecret }}{{ $sources = add1 $sources }}{{ end }}
{{- if $queue.dsn }}{{ $sources = add1 $sources }}{{ end }}
{{- if $queue.useHistoryDatabase }}{{ $sources = add1 $sources }}{{ end }}
{{- if eq $sources 0 }}
{{- fail "queue.enabled needs a DSN source for the queue store: set queue.existingSecret (a Secret holding a libpq or postgresql:// DSN), queue.useHistoryDatabase (the bundled PostgreSQL), or queue.dsn" }}
{{- else if gt $sources 1 }}
{{- fail "queue.existingSecret, queue.dsn and queue.useHistoryDatabase are mutually exclusive: choose one source for the queue DSN" }}
{{- end }}
{{- if $queue.existingSecret }}
{{- dict "name" $queue.existingSecret "key" $queue.existingSecretKey | toJson }}
{{- else if $queue.dsn }}
{{- dict "name" (include "vigil.queue.secretName" .) "key" "dsn" | toJson }}
{{- else if include "vigil.postgresql.enabled" . }}
{{- dict "name" (include "vigil.postgresql.fullname" .) "key" "queueDsn" | toJson }}
{{- else }}
{{- fail "queue.useHistoryDatabase needs the bundled PostgreSQL (postgresql.enabled true, or auto with replicaCount > 1 and no history.existingSecret): the history's SQLite cannot hold a queue, and for an external history database put a libpq or postgresql:// DSN in a Secret and set queue.existingSecret" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Name of the chart's own Secret holding queue.dsn. */}}
{{/*
Where VIGIL_QUEUE_API_PASSWORD comes from, as a dict {name, key}, or an empty dict when the HTTP API
has no database role of its own (the volume tier off, or queue.tenantRoles.enabled false): the
password of the API's login role, in queue.apiRole.existingSecret or the chart's <fullname>-queue-api.
*/}}
{{- define "vigil.queueApiSecretRef" -}}
{{- $queue := .Values.queue }}
{{- if not (and $queue.enabled $queue.tenantRoles.enabled) }}
{{- dict | toJson }}
{{- else if $queue.apiRole.existingSecret }}
{{- dict "name" $queue.apiRole.existingSecret "key" $queue.apiRole.existingSecretKey | toJson }}
{{- else }}
{{- dict "name" (include "vigil.queueApi.secretName" .) "key" "password" | toJson }}
{{- end }}
{{- end }}

{{- define "vigil.queueApi.secretName" -}}
{{- printf "%s-queue-api" (include "vigil.fullname" . | trunc 53 | trimSuffix "-") }}
{{- end }}

{{- define "vigil.queue.secretName" -}}
{{- printf "%s-queue" (include "vigil.fullname" . | trunc 57 | trimSuffix "-") }}
{{- end }}

{{/* Name of the example worker Deployment. */}}
{{- define "vigil.worker.fullname" -}}
{{- printf "%s-worker" (include "vigil.fullname" . | trunc 56 | trimSuffix "-") }}
{{- end }}

{{/* Selector labels of the example worker pods. */}}
{{- define "vigil.worker.selectorLabels" -}}
{{ include "vigil.selectorLabels" . }}
app.kubernetes.io/component: worker
{{- end }}

{{/* The example worker's image: workers.example.image, or the operator's when its repository is empty. */}}
{{- define "vigil.worker.image" -}}
{{- $image := .Values.workers.example.image }}
{{- if $image.repository }}
{{- printf "%s:%s" $image.repository (default .Chart.AppVersion $image.tag) }}
{{- else }}
{{- include "vigil.image" . }}
{{- end }}
{{- end }}

{{/* The Secret holding the API's certificate (tls.crt, tls.key, ca.crt): yours, or the chart's. */}}
{{- define "vigil.apiTls.secretName" -}}
{{- .Values.tls.existingSecret | default (printf "%s-api-tls" (include "vigil.fullname" .)) }}
{{- end }}

{{/* Whether cert-manager issues the API's certificate: asked for, and the cluster serves it. */}}
{{- define "vigil.apiTls.certManager" -}}
{{- if and .Values.tls.enabled (not .Values.tls.existingSecret) .Values.tls.certManager (.Capabilities.APIVersions.Has "cert-manager.io/v1") }}true{{ end }}
{{- end }}

{{/* The DNS names the API's certificate is for: the Service, in every form a client may use. */}}
{{- define "vigil.apiTls.dnsNames" -}}
{{- $svc := include "vigil.fullname" . }}
{{- $ns := .Release.Namespace }}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) "localhost" | toJson }}
{{- end }}

{{/*
The chart's own CA and certificate, base64 as a Secret's data holds them (JSON: tls.crt, tls.key,
ca.crt). Called with (dict "ctx" $ "existing" <the Secret as lookup found it, or empty>): an
existing Secret's data is reused as it is, so `helm upgrade` never rotates the certificate (nor
the CA clients trust); only a first install (or a deleted Secret) generates them. `helm template`
has no cluster to look in, so it generates new ones every time.
*/}}
{{- define "vigil.apiTls.material" -}}
{{- $ctx := .ctx }}
{{- $data := (.existing | default dict).data | default dict }}
{{- if and (hasKey $data "tls.crt") (hasKey $data "tls.key") (hasKey $data "ca.crt") }}
{{- dict "tls.crt" (index $data "tls.crt") "tls.key" (index $data "tls.key") "ca.crt" (index $data "ca.crt") | toJson }}
{{- else }}
{{- $days := int $ctx.Values.tls.validityDays }}
{{- $ca := genCA (printf "%s-api-ca" (include "vigil.fullname" $ctx)) $days }}
{{- $names := include "vigil.apiTls.dnsNames" $ctx | fromJsonArray }}
{{- $cert := genSignedCert (include "vigil.fullname" $ctx) (list "127.0.0.1") $names $days $ca }}
{{- dict "tls.crt" ($cert.Cert | b64enc) "tls.key" ($cert.Key | b64enc) "ca.crt" ($ca.Cert | b64enc) | toJson }}
{{- end }}
{{- end }}
