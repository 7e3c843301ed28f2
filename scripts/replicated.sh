# Replicated stores for the fault suite (ADR 0029): a 3-member etcd cluster
# (etcd-r1..3) and a 3-server ZooKeeper ensemble (zk-r1..3) on loopback, durability on (etcd
# fsyncs its WAL, ZooKeeper forceSync=yes). Sourced by scripts/backends.sh, which gives the
# commands:
#
#   backends.sh start-replicated      start the six members (installing what is missing), print exports
#   backends.sh stop-replicated       stop them
#   backends.sh env-replicated        print the exports again
#   backends.sh leader CLUSTER        the member that leads `etcd-cluster` or `zk-ensemble` now
#   backends.sh restart|pid MEMBER    as for any server (etcd-r2, zk-r3, ...)
#
# Ports: OFF (SIMBA_BACKENDS_PORT_OFFSET) + 52461-52466 (etcd client, peer), 52471-52476 and
# 52484-52486 (ZooKeeper client, quorum, election). Their last two digits are no other server's,
# so sets shifted by a multiple of 100 never collide.
# shellcheck shell=bash

REPL_ETCD=(etcd-r1 etcd-r2 etcd-r3)
REPL_ZK=(zk-r1 zk-r2 zk-r3)
REPL_NAMES=("${REPL_ETCD[@]}" "${REPL_ZK[@]}")
# The offset the last start-replicated in this base dir used, unless the variable says otherwise
# (a test calls `leader` and `restart` with only SIMBA_BACKENDS_DIR set).
REPL_OFF=$OFF
if [[ -z ${SIMBA_BACKENDS_PORT_OFFSET:-} && -f $BASE/replicated.offset ]]; then
  REPL_OFF=$(tr -dc '0-9' <"$BASE/replicated.offset")
fi
for _i in 1 2 3; do
  declare "ETCD_R${_i}_PORT=$((REPL_OFF + 52460 + _i))"
  declare "ETCD_R${_i}_PEER_PORT=$((REPL_OFF + 52463 + _i))"
  declare "ZK_R${_i}_PORT=$((REPL_OFF + 52470 + _i))"
  declare "ZK_R${_i}_QUORUM_PORT=$((REPL_OFF + 52473 + _i))"
  declare "ZK_R${_i}_ELECTION_PORT=$((REPL_OFF + 52483 + _i))"
done
unset _i

is_replica() { [[ $1 =~ ^(etcd|zk)-r[123]$ ]]; }

repl_owns() { # repl_owns NAME PID
  local cmd; cmd=$(tr '\0' ' ' <"/proc/$2/cmdline" 2>/dev/null) || return 1
  case $1 in
    etcd-r*) [[ $cmd == *"--data-dir=$(dir_of "$1")/data "* ]] ;;
    zk-r*) [[ $cmd == *"$(dir_of "$1")/zoo.cfg"* ]] ;;
  esac
}

repl_ready() {
  local p; p=$(port_of "$1")
  case $1 in
    # /health is true once the member sees a leader and a quorum.
    etcd-r*) [[ $(http_get "$p" /health) == *'"health":"true"'* ]] ;;
    zk-r*) [[ $(zk_cmd "$p" srvr) =~ Mode:\ (leader|follower) ]] ;;
  esac
}

repl_url() {
  case $1 in
    etcd-cluster) echo "etcd://127.0.0.1:$ETCD_R1_PORT,127.0.0.1:$ETCD_R2_PORT,127.0.0.1:$ETCD_R3_PORT" ;;
    zk-ensemble) echo "zk://127.0.0.1:$ZK_R1_PORT,127.0.0.1:$ZK_R2_PORT,127.0.0.1:$ZK_R3_PORT" ;;
  esac
}

spawn_etcd_member() { # spawn_etcd_member NAME
  local name=$1 dir peer cluster="" m
  dir=$(dir_of "$name"); mkdir -p "$dir"
  peer=${name^^}; peer=${peer//-/_}_PEER_PORT; peer=${!peer}
  for m in "${REPL_ETCD[@]}"; do
    local v=${m^^}; v=${v//-/_}_PEER_PORT
    cluster+="${cluster:+,}$m=http://127.0.0.1:${!v}"
  done
  # Durable: no --unsafe-no-fsync (every raft entry is fsynced before it counts). The same
  # timings as the single etcd (heartbeat 50 ms, election 500 ms: leases from 1 s).
  spawn "$name" etcd --name "$name" --data-dir="$dir/data" --logger=zap --log-outputs=stderr \
    --listen-client-urls "http://127.0.0.1:$(port_of "$name")" \
    --advertise-client-urls "http://127.0.0.1:$(port_of "$name")" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "$cluster" --initial-cluster-state new --initial-cluster-token simba-etcd-cluster \
    --heartbeat-interval=50 --election-timeout=500
}

spawn_zk_member() { # spawn_zk_member NAME
  local name=$1 dir cp i m v q e
  dir=$(dir_of "$name"); mkdir -p "$dir/data"
  i=${name#zk-r}
  cp=$(zk_classpath)
  [[ -n $cp ]] || die "$name: /usr/share/java/zookeeper.jar not found"
  echo "$i" >"$dir/data/myid"
  # forceSync=yes: the transaction log is fsynced before a write is acknowledged.
  zoo_cfg "$dir" "$(port_of "$name")" "$ZK_MAX_SESSION_MS" yes >"$dir/zoo.cfg"
  for m in 1 2 3; do
    v=ZK_R${m}_QUORUM_PORT; q=${!v}; v=ZK_R${m}_ELECTION_PORT; e=${!v}
    echo "server.$m=127.0.0.1:$q:$e" >>"$dir/zoo.cfg"
  done
  cat >"$dir/log4j.properties" <<'EOF'
log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{1}: %m%n
EOF
  spawn "$name" java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    -Djava.net.preferIPv4Stack=true -Dlog4j.configuration="file:$dir/log4j.properties" \
    -Dzookeeper.admin.enableServer=false -cp "$cp" \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg"
}

repl_env_text() {
  local n v
  printf 'export SIMBA_BACKENDS_DIR=%q\n' "$BASE"
  printf 'export SIMBA_BACKENDS_SCRIPT=%q\n' "$SCRIPT"
  printf 'export SIMBA_TEST_ETCD_CLUSTER_URL=%q\n' "$(repl_url etcd-cluster)"
  printf 'export SIMBA_TEST_ZK_ENSEMBLE_URL=%q\n' "$(repl_url zk-ensemble)"
  for n in "${REPL_NAMES[@]}"; do
    v=SIMBA_TEST_$(var_of "$n")
    printf 'export %s_PORT=%q\n' "$v" "$(port_of "$n")"
    printf 'export %s_PIDFILE=%q\n' "$v" "$(pidfile_of "$n")"
    printf 'export %s_LOG=%q\n' "$v" "$(log_of "$n")"
  done
}

cmd_start_replicated() {
  local n pid jobs=() to_spawn=() i failed="" t0=${EPOCHREALTIME/[.,]/}
  install_missing
  lock
  touch "$BASE/.simba-backends"
  for n in "${REPL_NAMES[@]}"; do
    pid=$(running_pid "$n")
    if [[ -n $pid ]]; then
      kill -s CONT "$pid" 2>/dev/null || true
      if repl_ready "$n"; then log "$n: already running (pid $pid)"; continue; fi
      # A member may wait for its peers: give a running one its chance below.
      log "$n: running (pid $pid), not ready yet"
      continue
    fi
    to_spawn+=("$n")
  done
  # All at once: a member is ready only when a quorum of its cluster runs.
  for n in "${to_spawn[@]}"; do (spawn_one "$n") & jobs+=($!); done
  for i in "${!to_spawn[@]}"; do wait "${jobs[$i]}" || failed=${failed:-${to_spawn[$i]}}; done
  [[ -z $failed ]] || fail_server "$failed" "could not be started"
  for n in "${REPL_NAMES[@]}"; do
    wait_ready "$n"
    log "$n: ready on 127.0.0.1:$(port_of "$n") (pid $(read_pid "$n"))"
  done
  echo "$REPL_OFF" >"$BASE/replicated.offset"
  repl_env_text >"$BASE/replicated.env.sh"
  t0=$(((${EPOCHREALTIME/[.,]/} - t0) / 1000))
  log "replicated stores ready in ${t0} ms; leaders: etcd $(repl_leader etcd-cluster), zk $(repl_leader zk-ensemble)"
  repl_env_text
}

cmd_stop_replicated() {
  local n
  [[ -d $BASE ]] || { log "nothing to stop: $BASE does not exist"; return 0; }
  lock
  for n in "${REPL_NAMES[@]}"; do
    if [[ -n $(running_pid "$n") ]]; then (stop_one "$n"; log "$n: stopped") & else rm -f "$(pidfile_of "$n")"; fi
  done
  wait
}

# The member that leads CLUSTER now (etcdctl endpoint status; ZooKeeper's `srvr`), or exit 1.
repl_leader() {
  local n p line
  case ${1:-} in
    etcd-cluster | etcd)
      for n in "${REPL_ETCD[@]}"; do
        p=$(port_of "$n")
        # endpoint, ID, version, DB size, is leader, is learner, raft term, index, applied, errors
        line=$(timeout 3 etcdctl --endpoints="http://127.0.0.1:$p" --dial-timeout=1s --command-timeout=2s \
          endpoint status 2>/dev/null) || continue
        [[ $(cut -d, -f5 <<<"$line" | tr -d ' ') == true ]] && { echo "$n"; return 0; }
      done ;;
    zk-ensemble | zk)
      for n in "${REPL_ZK[@]}"; do
        [[ $(zk_cmd "$(port_of "$n")" srvr) == *"Mode: leader"* ]] && { echo "$n"; return 0; }
      done ;;
    *) die "usage: backends.sh leader etcd-cluster|zk-ensemble" ;;
  esac
  log "${1}: no member says it leads"
  return 1
}
