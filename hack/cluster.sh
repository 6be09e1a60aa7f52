#!/usr/bin/env bash
# A real single-node Kubernetes cluster on this machine, for development and tests.
#
#   hack/cluster.sh up          install prerequisites (cached), start everything, wait for node Ready
#   hack/cluster.sh down        stop what `up` started and restore the machine
#   hack/cluster.sh status      exit 0 when the cluster is up and the node Ready
#   hack/cluster.sh kubeconfig  print the admin kubeconfig path
#   hack/cluster.sh env         print shell variables describing the cluster (KEY=value)
#
# Networking: the node lives on its own interface (k8s0, 10.250.0.1/32); pods on the cni0 bridge
# reach the node address only. No masquerade, and forwarding off the bridge is dropped, so pod
# traffic never leaves the machine. There is no kube-proxy: the one Service pods need,
# `kubernetes` (10.96.0.1:443), is a single DNAT rule to the API server. NetworkPolicies are
# enforced by kube-router in firewall-only mode (iptables + ipset, no routing, no service proxy).
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NODE_NAME=gdpval-node
NODE_IF=k8s0
NODE_IP=10.250.0.1
BRIDGE=cni0
POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/16
KUBERNETES_SVC_IP=10.96.0.1
API_PORT=6443
ETCD_CLIENT_PORT=23790
ETCD_PEER_PORT=23800
RULE_TAG=gdpval-dev

PKI="$WORKDIR/pki"
KCFG="$WORKDIR/kubeconfig"
LOGS="$WORKDIR/logs"
RUN="$WORKDIR/run"
STATE="$WORKDIR/state"
CTRD="$WORKDIR/containerd"
KUBELET_DIR="$WORKDIR/kubelet"
CNI_DIR="$WORKDIR/cni"
ADMIN_KUBECONFIG="$KCFG/admin.conf"

CONTAINERD_PREFIX="$CACHE/prefix/containerd"
ETCD_PREFIX="$CACHE/prefix/etcd-server"
CTR_SOCK="$CTRD/containerd.sock"

# Sysctls that the CNI bridge (ip_forward), the kubelet (vm.*, kernel.*) or we change.
SYSCTLS=(net.ipv4.ip_forward fs.inotify.max_user_instances fs.inotify.max_user_watches
         vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
         kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.bridge.bridge-nf-call-iptables)
# Host paths that components create outside $WORKDIR; removed on down unless they existed before.
HOST_PATHS=(/var/lib/cni /var/log/containers /var/log/pods /run/containerd /opt/containerd
            /etc/kubernetes /var/lib/kubelet)

export PATH="$CONTAINERD_PREFIX/usr/bin:$K8S_BIN:/usr/local/sbin:/usr/sbin:/sbin:/usr/local/bin:/usr/bin:/bin"

kubectl() { "$KUBECTL_BIN" --kubeconfig "$ADMIN_KUBECONFIG" "$@"; }
ctr() { "$CONTAINERD_PREFIX/usr/bin/ctr" --address "$CTR_SOCK" "$@"; }

# ---------------------------------------------------------------- processes

COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet kube-router)
KUBE_ROUTER_HEALTH_PORT=20244

component_binary() {
  case "$1" in
    etcd) echo "$ETCD_PREFIX/usr/bin/etcd" ;;
    containerd) echo "$CONTAINERD_PREFIX/usr/bin/containerd" ;;
    kube-router) echo "$KUBE_ROUTER_BIN" ;;
    *) echo "$K8S_BIN/$1" ;;
  esac
}

# A component is running when its pid file names a live process running the expected binary.
running() {
  local pidf="$RUN/$1.pid" pid exe
  [[ -f "$pidf" ]] || return 1
  pid="$(cat "$pidf")"
  exe="$(readlink "/proc/$pid/exe" 2>/dev/null)" || return 1
  [[ "$exe" == "$(readlink -f "$(component_binary "$1")")" ]]
}

start() {
  local name="$1"; shift
  if running "$name"; then
    return 0
  fi
  local bin
  bin="$(component_binary "$name")"
  [[ -x "$bin" ]] || die "$name binary missing: $bin"
  log "starting $name (log: $LOGS/$name.log)"
  # setsid: a component must outlive the shell (and pytest) that started it. Descriptors above 2
  # are closed so that no daemon keeps a caller's lock (flock) held for its whole life.
  (
    for fd in /proc/self/fd/*; do
      fd="${fd##*/}"
      if ((fd > 2)); then eval "exec $fd>&-" 2>/dev/null || true; fi
    done
    exec setsid "$bin" "$@" >>"$LOGS/$name.log" 2>&1 </dev/null
  ) &
  echo $! >"$RUN/$name.pid"
}

stop_component() {
  local name="$1" pid i
  running "$name" || { rm -f "$RUN/$name.pid"; return 0; }
  pid="$(cat "$RUN/$name.pid")"
  log "stopping $name ($pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$RUN/$name.pid"
}

# wait_for DESCRIPTION SECONDS COMMAND...: poll until COMMAND succeeds.
wait_for() {
  local what="$1" secs="$2"; shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      die "timed out after ${secs}s waiting for $what"
    fi
    sleep 0.5
  done
}

# ---------------------------------------------------------------- host state

# Record what `up` is about to change, once per up/down cycle, so `down` can put it back.
record_host_state() {
  mkdir -p "$STATE"
  [[ -f "$STATE/recorded" ]] && return 0
  local s p
  : >"$STATE/sysctl.orig"
  for s in "${SYSCTLS[@]}"; do
    echo "$s=$(sysctl -n "$s")" >>"$STATE/sysctl.orig"
  done
  : >"$STATE/paths.orig"
  for p in "${HOST_PATHS[@]}"; do
    [[ -e "$p" ]] && echo "$p" >>"$STATE/paths.orig"
  done
  for t in iptables ip6tables; do
    "$t-save" 2>/dev/null | awk '/^:/ {print substr($1, 2)}' | sort -u >"$STATE/$t-chains.orig"
  done
  ipset list -n 2>/dev/null | sort -u >"$STATE/ipsets.orig" || true
  touch "$STATE/recorded"
}

# ipt IPTABLES ARGS...: add a tagged rule unless it is already present.
ipt_ensure() {
  local t="$1"; shift
  local table="$1"; shift
  "$t" -t "$table" -C "$@" -m comment --comment "$RULE_TAG" 2>/dev/null ||
    "$t" -t "$table" "${IPT_OP:--I}" "$@" -m comment --comment "$RULE_TAG"
}

setup_network() {
  if ! ip link show "$NODE_IF" >/dev/null 2>&1; then
    # Some VM kernels lack the dummy driver; a bridge without ports holds an address as well.
    ip link add "$NODE_IF" type dummy 2>/dev/null || ip link add "$NODE_IF" type bridge
  fi
  ip addr replace "$NODE_IP/32" dev "$NODE_IF"
  ip link set "$NODE_IF" up
  # Pods may talk to each other and to the node; nothing bridged out of cni0 is forwarded. In the
  # mangle table, which runs before filter: kube-router ACCEPTs policy-allowed traffic in its own
  # chain at the top of filter FORWARD, which would otherwise pass before these rules.
  ipt_ensure iptables mangle FORWARD -i "$BRIDGE" ! -o "$BRIDGE" -j DROP
  ipt_ensure iptables mangle FORWARD -o "$BRIDGE" ! -i "$BRIDGE" -j DROP
  # The `kubernetes` Service, for in-cluster clients, without kube-proxy.
  ipt_ensure iptables nat PREROUTING -i "$BRIDGE" -d "$KUBERNETES_SVC_IP/32" -p tcp --dport 443 \
    -j DNAT --to-destination "$NODE_IP:$API_PORT"
  sysctl -qw fs.inotify.max_user_instances=8192
  # Pod-to-pod traffic on the bridge passes iptables, so policies hold between pods too.
  sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null ||
    log "warning: no br_netfilter in this kernel: NetworkPolicies do not hold between pods"
  mkdir -p "$CNI_DIR/net.d" "$CNI_DIR/ipam"
  cat >"$CNI_DIR/net.d/10-bridge.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "gdpval-pods",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_CIDR"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$CNI_DIR/ipam"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "loopback"}
  ]
}
EOF
}

# ---------------------------------------------------------------- PKI and kubeconfigs

# cert NAME SUBJECT [SAN] [EXT_USAGE]: a key and a certificate signed by the cluster CA.
cert() {
  local name="$1" subj="$2" san="${3:-}" usage="${4:-clientAuth}"
  [[ -f "$PKI/$name.crt" ]] && return 0
  local ext="$PKI/$name.ext"
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$usage"
    [[ -n "$san" ]] && echo "subjectAltName=$san"
  } >"$ext"
  openssl genrsa -out "$PKI/$name.key" 2048 2>/dev/null
  openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 3650 -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr" "$ext"
}

kubeconfig() {
  local name="$1" user="$2"
  local f="$KCFG/$name.conf"
  [[ -f "$f" ]] && return 0
  cat >"$f" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: gdpval-dev
  cluster:
    server: https://$NODE_IP:$API_PORT
    certificate-authority: $PKI/ca.crt
users:
- name: $user
  user:
    client-certificate: $PKI/$name.crt
    client-key: $PKI/$name.key
contexts:
- name: gdpval-dev
  context: {cluster: gdpval-dev, user: $user}
current-context: gdpval-dev
EOF
  chmod 600 "$f"
}

setup_pki() {
  mkdir -p "$PKI" "$KCFG"
  chmod 700 "$PKI"
  if [[ ! -f "$PKI/ca.crt" ]]; then
    log "creating PKI in $PKI"
    openssl genrsa -out "$PKI/ca.key" 2048 2>/dev/null
    openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=gdpval-dev-ca" -days 3650 \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
      -out "$PKI/ca.crt" 2>/dev/null
  fi
  cert apiserver "/CN=kube-apiserver" \
    "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:$NODE_IP,IP:$KUBERNETES_SVC_IP" \
    serverAuth
  cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
  cert admin "/O=system:masters/CN=gdpval-admin"
  cert controller-manager "/CN=system:kube-controller-manager"
  cert scheduler "/CN=system:kube-scheduler"
  cert kubelet "/O=system:nodes/CN=system:node:$NODE_NAME"
  cert kubelet-serving "/CN=$NODE_NAME" "DNS:$NODE_NAME,IP:$NODE_IP" serverAuth
  cert kube-router "/CN=system:kube-router"
  if [[ ! -f "$PKI/sa.key" ]]; then
    openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
    openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  fi
  kubeconfig admin gdpval-admin
  kubeconfig controller-manager system:kube-controller-manager
  kubeconfig scheduler system:kube-scheduler
  kubeconfig kubelet "system:node:$NODE_NAME"
  kubeconfig kube-router system:kube-router
}

# ---------------------------------------------------------------- components

start_etcd() {
  start etcd --name gdpval-dev --data-dir "$WORKDIR/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "gdpval-dev=http://127.0.0.1:$ETCD_PEER_PORT" \
    --listen-metrics-urls "" --log-level warn \
    --unsafe-no-fsync --snapshot-count 10000 --quota-backend-bytes 2147483648
  wait_for etcd 60 curl -fsS "http://127.0.0.1:$ETCD_CLIENT_PORT/health"
}

start_apiserver() {
  start kube-apiserver \
    --etcd-servers "http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --bind-address "$NODE_IP" --advertise-address "$NODE_IP" --secure-port "$API_PORT" \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --client-ca-file "$PKI/ca.crt" \
    --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types InternalIP \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --authorization-mode Node,RBAC \
    --enable-admission-plugins NodeRestriction,PodSecurity \
    --allow-privileged=true --profiling=false --v=1
  wait_for kube-apiserver 120 kubectl get --raw /readyz
}

start_controllers() {
  start kube-controller-manager \
    --kubeconfig "$KCFG/controller-manager.conf" \
    --authentication-kubeconfig "$KCFG/controller-manager.conf" \
    --authorization-kubeconfig "$KCFG/controller-manager.conf" \
    --bind-address 127.0.0.1 --leader-elect=false --use-service-account-credentials \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
    --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
    --service-cluster-ip-range "$SERVICE_CIDR" --profiling=false --v=1
  start kube-scheduler \
    --kubeconfig "$KCFG/scheduler.conf" \
    --authentication-kubeconfig "$KCFG/scheduler.conf" \
    --authorization-kubeconfig "$KCFG/scheduler.conf" \
    --bind-address 127.0.0.1 --leader-elect=false --profiling=false --v=1
}

start_containerd() {
  mkdir -p "$CTRD"
  cat >"$CTRD/config.toml" <<EOF
version = 2
root = "$CTRD/root"
state = "$CTRD/state"
disabled_plugins = ["io.containerd.internal.v1.tracing", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "$CTR_SOCK"
[ttrpc]
  address = "$CTR_SOCK.ttrpc"
[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "$CTRD/opt"
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$(cat "$CACHE/images/pause.ref")"
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    stream_server_address = "127.0.0.1"
    enable_cdi = false
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          BinaryName = "$(command -v runc)"
          Root = "$CTRD/runc"
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "$CNI_DIR/net.d"
EOF
  start containerd --config "$CTRD/config.toml"
  wait_for containerd 60 ctr version
}

start_kubelet() {
  mkdir -p "$KUBELET_DIR" "$WORKDIR/pod-logs"
  cat >"$KUBELET_DIR/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization:
  mode: Webhook
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
containerRuntimeEndpoint: unix://$CTR_SOCK
cgroupDriver: cgroupfs
failSwapOn: false
oomScoreAdj: 0
protectKernelDefaults: false
makeIPTablesUtilChains: false
podLogsDir: $WORKDIR/pod-logs
resolvConf: /etc/resolv.conf
clusterDomain: cluster.local
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
maxPods: 110
EOF
  start kubelet --config "$KUBELET_DIR/config.yaml" --kubeconfig "$KCFG/kubelet.conf" \
    --root-dir "$KUBELET_DIR" --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" --v=1
}

# The firewall reads pods, namespaces, policies and the node; its informers list Services and
# Endpoints(Slices) too. It records Events.
kube_router_rbac() {
  kubectl apply -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:kube-router"}
rules:
- apiGroups: [""]
  resources: [namespaces, pods, services, endpoints, nodes]
  verbs: [get, list, watch]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:kube-router"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:kube-router"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:kube-router"}
EOF
}

# Ready once it answers its health check and has hooked its chain into FORWARD.
kube_router_ready() {
  curl -fsS "http://127.0.0.1:$KUBE_ROUTER_HEALTH_PORT/healthz" && iptables -S FORWARD | grep -q -- "-j KUBE-ROUTER-FORWARD"
}

# NetworkPolicy enforcement only. It reads the node object at start, so it starts after the node
# registered.
start_kube_router() {
  kube_router_rbac
  start kube-router --kubeconfig "$KCFG/kube-router.conf" --hostname-override "$NODE_NAME" \
    --run-firewall=true --run-router=false --run-service-proxy=false --enable-cni=false \
    --service-cluster-ip-range "$SERVICE_CIDR" --health-port "$KUBE_ROUTER_HEALTH_PORT" --metrics-port 0 --v=1
  wait_for kube-router 120 kube_router_ready
}

node_ready() {
  [[ "$(kubectl get node "$NODE_NAME" \
    -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]
}

# Ready as reported by a kubelet started at or after $1 (epoch seconds): after a restart the
# node object still carries the previous kubelet's Ready status for a while.
node_ready_since() {
  local out
  out="$(kubectl get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].lastHeartbeatTime}' 2>/dev/null)" || return 1
  [[ "${out%% *}" == True ]] && (($(date -d "${out#* }" +%s) >= $1))
}

default_sa_ready() {
  kubectl -n default get serviceaccount default
}

cluster_up() {
  [[ $EUID -eq 0 ]] || die "run as root"
  mkdir -p "$WORKDIR" "$LOGS" "$RUN"
  if status_quiet; then
    log "cluster already up; kubeconfig: $ADMIN_KUBECONFIG"
    echo "$ADMIN_KUBECONFIG"
    return 0
  fi
  local t0=$SECONDS
  "$HACK_DIR/cluster-prereqs.sh" --no-build
  "$HACK_DIR/build-k8s.sh"
  "$HACK_DIR/build-tools.sh" kube-router kubectl-helm
  "$HACK_DIR/images.sh" base pause
  record_host_state
  setup_network
  setup_pki
  start_etcd
  start_apiserver
  start_controllers
  start_containerd
  "$HACK_DIR/images.sh" import-core
  if running kubelet; then
    wait_for "node $NODE_NAME Ready" 180 node_ready
  else
    local kubelet_started
    kubelet_started=$(($(date +%s) - 1))
    start_kubelet
    wait_for "node $NODE_NAME Ready" 180 node_ready_since "$kubelet_started"
  fi
  wait_for "default service account" 60 default_sa_ready
  start_kube_router
  log "cluster up in $((SECONDS - t0))s; kubeconfig: $ADMIN_KUBECONFIG"
  echo "$ADMIN_KUBECONFIG"
}

# ---------------------------------------------------------------- down

# Kill every process still inside the kubelet's pod cgroups (containers whose shim is gone).
kill_pod_cgroups() {
  local f pid
  for f in /sys/fs/cgroup/*/kubepods; do
    [[ -d "$f" ]] || continue
    while read -r pid; do
      kill -KILL "$pid" 2>/dev/null || true
    done < <(find "$f" -name cgroup.procs -exec cat {} + 2>/dev/null)
  done
}

remove_pod_cgroups() {
  local f
  for f in /sys/fs/cgroup/*/kubepods; do
    [[ -d "$f" ]] || continue
    find "$f" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
}

stop_containers() {
  running containerd || return 0
  local id
  for id in $(ctr -n k8s.io tasks ls -q 2>/dev/null); do
    ctr -n k8s.io tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
  done
  sleep 0.5
  for id in $(ctr -n k8s.io tasks ls -q 2>/dev/null); do
    ctr -n k8s.io tasks delete -f "$id" >/dev/null 2>&1 || true
  done
}

# Processes started from our binaries (shims outlive containerd by design).
kill_leftovers() {
  local prefixes=("$(readlink -f "$CONTAINERD_PREFIX")/" "$(readlink -f "$ETCD_PREFIX")/" "$K8S_BIN/" "$(dirname "$KUBE_ROUTER_BIN")/")
  local p exe pre
  for p in /proc/[0-9]*; do
    exe="$(readlink "$p/exe" 2>/dev/null)" || continue
    for pre in "${prefixes[@]}"; do
      if [[ "$exe" == "$pre"* ]]; then
        kill -KILL "${p#/proc/}" 2>/dev/null || true
      fi
    done
  done
}

unmount_all() {
  local m
  # Deepest first; lazy as a last resort so a busy mount cannot block the rest.
  while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done < <(findmnt -rn -o TARGET | awk -v w="$WORKDIR" '$0 == w || index($0, w "/") == 1' | sort -r)
}

# Remove our tagged rules, then the chains the kubelet and CNI plugins added.
clean_iptables() {
  local t table rule chain
  for t in iptables ip6tables; do
    command -v "$t" >/dev/null || continue
    for table in filter nat mangle raw; do
      while read -r rule; do
        eval "$t -t $table -D ${rule#-A }" 2>/dev/null || true
      done < <("$t-save" -t "$table" 2>/dev/null | grep -F -- "--comment $RULE_TAG" || true)
    done
    [[ -f "$STATE/$t-chains.orig" ]] || continue
    for table in filter nat mangle raw; do
      local new_chains=()
      while read -r chain; do
        grep -qxF "$chain" "$STATE/$t-chains.orig" || new_chains+=("$chain")
      done < <("$t-save" -t "$table" 2>/dev/null | awk '/^:(KUBE-|CNI-)/ {print substr($1, 2)}')
      for chain in "${new_chains[@]}"; do
        while read -r rule; do
          eval "$t -t $table -D ${rule#-A }" 2>/dev/null || true
        done < <("$t-save" -t "$table" | grep -E -- "-j $chain( |\$)" || true)
      done
      for chain in "${new_chains[@]}"; do
        "$t" -t "$table" -F "$chain" 2>/dev/null || true
      done
      for chain in "${new_chains[@]}"; do
        "$t" -t "$table" -X "$chain" 2>/dev/null || true
      done
    done
  done
}

# The sets kube-router made (their rules are gone with its chains).
clean_ipsets() {
  [[ -f "$STATE/ipsets.orig" ]] && command -v ipset >/dev/null || return 0
  local set
  while read -r set; do
    grep -qxF "$set" "$STATE/ipsets.orig" || ipset destroy "$set" 2>/dev/null || true
  done < <(ipset list -n 2>/dev/null)
}

restore_host_state() {
  local line p
  if [[ -f "$STATE/sysctl.orig" ]]; then
    while read -r line; do
      sysctl -qw "$line" || true
    done <"$STATE/sysctl.orig"
  fi
  if [[ -f "$STATE/paths.orig" ]]; then
    for p in "${HOST_PATHS[@]}"; do
      [[ -e "$p" ]] || continue
      grep -qxF "$p" "$STATE/paths.orig" && continue
      if findmnt -rn -o TARGET | grep -q "^$p\(/\|\$\)"; then
        log "warning: $p holds a mount; left in place"
        continue
      fi
      rm -rf --one-file-system "$p" || log "warning: could not remove $p"
    done
  fi
  rm -f "$STATE"/*.orig "$STATE/recorded"
}

cluster_down() {
  [[ $EUID -eq 0 ]] || die "run as root"
  stop_component kube-router
  stop_component kubelet
  stop_containers
  kill_pod_cgroups
  stop_component containerd
  local c
  for c in kube-scheduler kube-controller-manager kube-apiserver etcd; do
    stop_component "$c"
  done
  kill_leftovers
  kill_pod_cgroups
  sleep 0.5
  unmount_all
  remove_pod_cgroups
  # Pod sandboxes are gone: their addresses are free again.
  rm -rf --one-file-system "$CNI_DIR/ipam" "$CTRD/runc" "$CTRD/state"
  local l
  for l in $(ip -o link show type veth 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
    if [[ "$(ip -o link show "$l" 2>/dev/null)" == *"master $BRIDGE "* ]]; then
      ip link del "$l" 2>/dev/null || true
    fi
  done
  ip link del "$BRIDGE" 2>/dev/null || true
  ip link del "$NODE_IF" 2>/dev/null || true
  clean_iptables
  clean_ipsets
  restore_host_state
  log "cluster down"
}

# ---------------------------------------------------------------- status

status_quiet() {
  local c
  for c in "${COMPONENTS[@]}"; do
    running "$c" || return 1
  done
  node_ready
}

cluster_status() {
  local c rc=0
  for c in "${COMPONENTS[@]}"; do
    if running "$c"; then echo "$c: running (pid $(cat "$RUN/$c.pid"))"; else echo "$c: stopped"; rc=1; fi
  done
  if node_ready; then echo "node $NODE_NAME: Ready"; else echo "node $NODE_NAME: not ready"; rc=1; fi
  return $rc
}

cluster_env() {
  cat <<EOF
KUBECONFIG=$ADMIN_KUBECONFIG
NODE_NAME=$NODE_NAME
NODE_IP=$NODE_IP
BRIDGE=$BRIDGE
NODE_IF=$NODE_IF
POD_CIDR=$POD_CIDR
RULE_TAG=$RULE_TAG
WORKDIR=$WORKDIR
KUBECTL=$KUBECTL_BIN
STATE=$STATE
HOST_PATHS=${HOST_PATHS[*]}
OWN_BINARIES=$(readlink -f "$CONTAINERD_PREFIX") $(readlink -f "$ETCD_PREFIX") $K8S_BIN $(dirname "$KUBE_ROUTER_BIN")
EOF
}

case "${1:-}" in
  up) with_lock cluster-state cluster_up ;;
  down) with_lock cluster-state cluster_down ;;
  status) cluster_status ;;
  kubeconfig) echo "$ADMIN_KUBECONFIG" ;;
  env) cluster_env ;;
  *) echo "usage: $0 up|down|status|kubeconfig|env" >&2; exit 2 ;;
esac
