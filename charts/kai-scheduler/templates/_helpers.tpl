{{/*
Labels. kai.selectorLabels never change (Deployment selectors are immutable); kai.labels adds
Helm's own (helm.sh/chart, app.kubernetes.io/managed-by, instance, version), which the
kustomize base in manifests/ does not carry.
*/}}
{{- define "kai.selectorLabels" -}}
app.kubernetes.io/name: kai
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "kai.labels" -}}
{{ include "kai.selectorLabels" . }}
app.kubernetes.io/part-of: kai-scheduler
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
{{- end }}

{{/*
Cluster-scoped names that exist once per install (ClusterRoles, bindings, webhook
configurations) carry the release namespace, so installs in two namespaces never clash.
*/}}
{{- define "kai.clusterName" -}}
{{ .root.Release.Namespace }}:{{ .name }}
{{- end }}

{{/*
The webhook configurations' name: kai-webhook, the name under which `kai webhook` publishes its
caBundle (so one webhook install per cluster).
*/}}
{{- define "kai.webhookName" -}}
kai-webhook
{{- end }}

{{- define "kai.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/*
"true" when a shared cluster-wide object (KAI's PriorityClasses, default queues, the
reservation namespace) may be rendered: it does not exist yet, or this release owns it. Another
install's object is left alone. `helm template` (and Argo CD) cannot look up: always "true".
A kind the API server does not serve yet (the Queue CRD that `helm install` has just created
from crds/, before its discovery is up) has no objects: no lookup, which would fail the install.
*/}}
{{- define "kai.mayOwn" -}}
{{- $existing := dict -}}
{{- if .root.Capabilities.APIVersions.Has (printf "%s/%s" .apiVersion .kind) -}}
{{- $existing = lookup .apiVersion .kind "" .name -}}
{{- end -}}
{{- if not $existing -}}
true
{{- else -}}
{{- $annotations := $existing.metadata.annotations | default dict -}}
{{- if and (eq (index $annotations "meta.helm.sh/release-name" | default "") .root.Release.Name) (eq (index $annotations "meta.helm.sh/release-namespace" | default "") .root.Release.Namespace) -}}
true
{{- end -}}
{{- end -}}
{{- end }}

{{/*
"true" when the object does not exist in the cluster (or its kind is not served yet, as right
after `helm install` created the CRDs). `helm template` (and Argo CD): always "true".
*/}}
{{- define "kai.absent" -}}
{{- $existing := dict -}}
{{- if .root.Capabilities.APIVersions.Has (printf "%s/%s" .apiVersion .kind) -}}
{{- $existing = lookup .apiVersion .kind "" .name -}}
{{- end -}}
{{- if not $existing -}}
true
{{- end -}}
{{- end }}

{{/* The pod-level and container-level security settings of every component. */}}
{{- define "kai.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "kai.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/*
A component's Deployment, metrics Service and PodDisruptionBudget.
Arguments: root, component (scheduler/binder/...), values (its values block), args (list),
extraPorts, volumes, volumeMounts (lists, optional), serviceAccount (default: the component).
*/}}
{{- define "kai.component" -}}
{{- $root := .root -}}
{{- $v := .values -}}
{{- if and (gt (int $v.replicas) 1) (not $root.Values.leaderElection) (has .component (list "scheduler" "binder" "controller")) -}}
{{- fail (printf "%s.replicas is %d: more than one replica needs leaderElection: true" .component (int $v.replicas)) -}}
{{- end }}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: kai-{{ .component }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "kai.labels" . | nindent 4 }}
spec:
  replicas: {{ $v.replicas }}
  revisionHistoryLimit: 3
  selector:
    matchLabels:
      {{- include "kai.selectorLabels" . | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "kai.selectorLabels" . | nindent 8 }}
      {{- with $root.Values.podAnnotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      serviceAccountName: kai-{{ .serviceAccount | default .component }}
      securityContext:
        {{- include "kai.podSecurityContext" . | nindent 8 }}
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
      - name: {{ .component }}
        image: {{ include "kai.image" $root }}
        imagePullPolicy: {{ $root.Values.image.pullPolicy }}
        args:
        {{- range .args }}
        - {{ . | quote }}
        {{- end }}
        - --metrics-port={{ $root.Values.metrics.port }}
        - --log-level={{ $root.Values.logLevel }}
        {{- if not $root.Values.leaderElection }}
        - --no-leader-election
        {{- end }}
        {{- with .env }}
        env:
        {{- toYaml . | nindent 8 }}
        {{- end }}
        ports:
        - name: metrics
          containerPort: {{ $root.Values.metrics.port }}
          protocol: TCP
        {{- with .extraPorts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
        livenessProbe:
          httpGet: {path: /healthz, port: metrics}
          initialDelaySeconds: 10
          periodSeconds: 20
          timeoutSeconds: 5
          failureThreshold: 3
        readinessProbe:
          httpGet: {path: /readyz, port: metrics}
          periodSeconds: 10
          timeoutSeconds: 5
          failureThreshold: 3
        resources:
          {{- toYaml $v.resources | nindent 10 }}
        securityContext:
          {{- include "kai.containerSecurityContext" . | nindent 10 }}
        volumeMounts:
        - name: tmp
          mountPath: /tmp
        {{- with .volumeMounts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      volumes:
      - name: tmp
        emptyDir: {}
      {{- with .volumes }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
      {{- with $root.Values.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $root.Values.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $root.Values.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
---
apiVersion: v1
kind: Service
metadata:
  name: kai-{{ .component }}-metrics
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "kai.labels" . | nindent 4 }}
spec:
  selector:
    {{- include "kai.selectorLabels" . | nindent 4 }}
  ports:
  - name: metrics
    port: {{ $root.Values.metrics.port }}
    targetPort: metrics
    protocol: TCP
{{- if $root.Values.podDisruptionBudget.enabled }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: kai-{{ .component }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "kai.labels" . | nindent 4 }}
spec:
  maxUnavailable: {{ $root.Values.podDisruptionBudget.maxUnavailable }}
  selector:
    matchLabels:
      {{- include "kai.selectorLabels" . | nindent 6 }}
{{- end }}
{{- if $root.Values.metrics.serviceMonitor.enabled }}
---
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: kai-{{ .component }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "kai.labels" . | nindent 4 }}
    {{- with $root.Values.metrics.serviceMonitor.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  selector:
    matchLabels:
      {{- include "kai.selectorLabels" . | nindent 6 }}
  endpoints:
  - port: metrics
    path: /metrics
    interval: {{ $root.Values.metrics.serviceMonitor.interval }}
    scrapeTimeout: {{ $root.Values.metrics.serviceMonitor.scrapeTimeout }}
{{- end }}
{{- end }}

{{/*
A component's ServiceAccount, ClusterRole + binding and (when rules are given) a Role + binding
in the release namespace. Arguments: root, component, clusterRules, namespaceRules.
*/}}
{{- /* The ServiceAccounts a component's roles are bound to: its own, and the scheduler's
when the component runs in the scheduler's process (scheduler.inProcess). */}}
{{- define "kai.subjects" }}
- kind: ServiceAccount
  name: kai-{{ .component }}
  namespace: {{ .root.Release.Namespace }}
{{- if has .component (.root.Values.scheduler.inProcess | default list) }}
- kind: ServiceAccount
  name: kai-scheduler
  namespace: {{ .root.Release.Namespace }}
{{- end }}
{{- end }}

{{- define "kai.rbac" -}}
{{- $root := .root -}}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: kai-{{ .component }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "kai.labels" . | nindent 4 }}
automountServiceAccountToken: true
{{- with .clusterRules }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ include "kai.clusterName" (dict "root" $root "name" $.component) }}
  labels:
    {{- include "kai.labels" $ | nindent 4 }}
rules:
{{ . | trim }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ include "kai.clusterName" (dict "root" $root "name" $.component) }}
  labels:
    {{- include "kai.labels" $ | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ include "kai.clusterName" (dict "root" $root "name" $.component) }}
subjects:
{{- include "kai.subjects" (dict "root" $root "component" $.component) }}
{{- end }}
{{- with .namespaceRules }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: kai-{{ $.component }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "kai.labels" $ | nindent 4 }}
rules:
{{ . | trim }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: kai-{{ $.component }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "kai.labels" $ | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: kai-{{ $.component }}
subjects:
{{- include "kai.subjects" (dict "root" $root "component" $.component) }}
{{- end }}
{{- end }}
