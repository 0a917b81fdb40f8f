{{/* SPDX-License-Identifier: Apache-2.0 */}}

{{/*
edgeplane.name is the app.kubernetes.io/name of every object: the chart's
name unless nameOverride replaces it. Label values are capped at 63
characters.
*/}}
{{- define "edgeplane.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
edgeplane.fullname prefixes every object's name. The release name alone
when it already holds the chart's name, so `helm install edgeplane` does
not make "edgeplane-edgeplane-agent". It is capped at 52 characters so
that the longest suffix below (-controller, 11) still leaves a name that
fits a 63-character DNS label.
*/}}
{{- define "edgeplane.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
edgeplane.chart is the helm.sh/chart label: name and version, with a
"+" (not allowed in a label value) turned into "_".
*/}}
{{- define "edgeplane.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
edgeplane.selectorLabels are the labels a workload's selector and its
Service match on. They never include the version: a Deployment's
selector is immutable, so a label that changes with an upgrade would
make the upgrade fail. Called with (dict "ctx" $ "component" NAME).
*/}}
{{- define "edgeplane.selectorLabels" -}}
app.kubernetes.io/name: {{ include "edgeplane.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/*
edgeplane.labels are the recommended labels of every object. Called with
(dict "ctx" $ "component" NAME).
*/}}
{{- define "edgeplane.labels" -}}
helm.sh/chart: {{ include "edgeplane.chart" .ctx }}
{{ include "edgeplane.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: edgeplane
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
{{- end }}

{{/*
edgeplane.image is the image reference; its tag defaults to the chart's
appVersion so that a chart version deploys the release it was tested
with.
*/}}
{{- define "edgeplane.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* edgeplane.agentServiceAccount is the agents' ServiceAccount name. */}}
{{- define "edgeplane.agentServiceAccount" -}}
{{- if .Values.agent.serviceAccount.create }}
{{- default (printf "%s-agent" (include "edgeplane.fullname" .)) .Values.agent.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.agent.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* edgeplane.controllerServiceAccount is the controller's ServiceAccount name. */}}
{{- define "edgeplane.controllerServiceAccount" -}}
{{- if .Values.controller.serviceAccount.create }}
{{- default (printf "%s-controller" (include "edgeplane.fullname" .)) .Values.controller.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.controller.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
edgeplane.apiTokensSecret is the Secret holding the controller's API
tokens: the one values name, else the one this chart generates.
*/}}
{{- define "edgeplane.apiTokensSecret" -}}
{{- default (printf "%s-api-tokens" (include "edgeplane.fullname" .)) .Values.controller.apiTokensSecret }}
{{- end }}

{{/*
edgeplane.etcdEndpoints is the --etcd flag's value: the endpoints joined
by commas. An empty list fails the render rather than start agents that
can never reach their state.
*/}}
{{- define "edgeplane.etcdEndpoints" -}}
{{- $e := .Values.etcd }}
{{- if not $e.endpoints }}
{{- fail "etcd.endpoints: at least one etcd endpoint is required" }}
{{- end }}
{{- if not $e.insecure }}
{{- if not $e.tls.enabled }}
{{- fail "etcd.tls.enabled: without TLS anyone on the path reads the fleet's state and, without auth, writes every gateway's rules; set etcd.insecure=true to run so anyway" }}
{{- end }}
{{- range $e.endpoints }}
{{- if not (hasPrefix "https://" .) }}
{{- fail (printf "etcd.endpoints: %s is not https://; set etcd.insecure=true to reach etcd in clear anyway" .) }}
{{- end }}
{{- end }}
{{- end }}
{{- join "," $e.endpoints }}
{{- end }}

{{/*
edgeplane.etcdHosts are the host names and addresses of the etcd
endpoints, without scheme and port, as a list: the generated server
certificate is valid for them.
*/}}
{{- define "edgeplane.etcdHosts" -}}
{{- $hosts := list }}
{{- range .Values.etcd.endpoints }}
{{- $h := regexReplaceAll ":[0-9]+$" (urlParse .).host "" | trimPrefix "[" | trimSuffix "]" }}
{{- $hosts = append $hosts $h }}
{{- end }}
{{- concat $hosts .Values.etcd.tls.serverNames | uniq | toJson }}
{{- end }}

{{/*
edgeplane.etcdTLSArgs are the etcd client TLS flags, as YAML list items,
for when etcd.tls.enabled: the files are those of the Secret that
edgeplane.etcdTLSSecret names, mounted at /etc/edgeplane/etcd.
*/}}
{{- define "edgeplane.etcdTLSArgs" -}}
- --etcd-ca
- /etc/edgeplane/etcd/ca.crt
- --etcd-cert
- /etc/edgeplane/etcd/tls.crt
- --etcd-key
- /etc/edgeplane/etcd/tls.key
{{- end }}

{{/*
edgeplane.etcdTLSSecret is the name of the etcd client certificate
Secret of a component. Called with (dict "ctx" $ "component" NAME).
*/}}
{{- define "edgeplane.etcdTLSSecret" -}}
{{- $tls := .ctx.Values.etcd.tls }}
{{- $name := default (printf "%s-etcd-client" (include "edgeplane.fullname" .ctx)) $tls.secretName }}
{{- if and (eq .component "controller") $tls.controllerSecretName }}
{{- $name = $tls.controllerSecretName }}
{{- end }}
{{- $name }}
{{- end }}

{{/*
edgeplane.controllerPasswordSecret is the Secret of the controller's etcd
password: the one values name, else the one this chart's hook creates.
*/}}
{{- define "edgeplane.controllerPasswordSecret" -}}
{{- default (printf "%s-etcd-controller" (include "edgeplane.fullname" .)) .Values.etcd.auth.controller.passwordSecret }}
{{- end }}

{{/*
edgeplane.kubeletPodList is "true" when the agents read the kubelet's pod
list (agent.podList is a URL): only then do they need nodes/proxy and
their service account token.
*/}}
{{- define "edgeplane.kubeletPodList" -}}
{{- if regexMatch "^https?://" .Values.agent.podList }}true{{ end }}
{{- end }}

{{/*
edgeplane.hookAnnotations make an object a hook created before install
and upgrade, before the pods that mount it, and replaced each time with
the content it had (read back with lookup). Helm does not delete hooks
with the release, so `helm uninstall` keeps it.
*/}}
{{- define "edgeplane.hookAnnotations" -}}
helm.sh/hook: pre-install,pre-upgrade
helm.sh/hook-weight: "-10"
helm.sh/hook-delete-policy: before-hook-creation
{{- end }}
