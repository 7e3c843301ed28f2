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
# And a PostgreSQL primary with a synchronous and an asynchronous standby (pg-primary, pg-sync,
# pg-async; fsync on, synchronous_commit = on, synchronous_standby_names = 'pg_sync'), built
# afresh by every start (a fault run promotes a standby, so the set is not reusable):
#
#   backends.sh start-pg-replicated   (re)build the three: initdb, pg_basebackup -R, streaming
#   backends.sh pg-detach pg-async    a standby stops receiving WAL (primary_conninfo pointed at
#                                     a closed port, reloaded): the writes it will never get
#   backends.sh promote pg-sync       pg_ctl promote, waits until it accepts writes
#
# Ports: OFF (SIMBA_BACKENDS_PORT_OFFSET) + 52461-52466 (etcd client, peer), 52471-52476 and
# 52484-52486 (ZooKeeper client, quorum, election), 52492-52494 (PostgreSQL primary, sync, async).
# Their last two digits are no other server's, so sets shifted by a multiple of 100 never collide.
# shellcheck shell=bash

REPL_ETCD=(etcd-r1 etcd-r2 etcd-r3)
REPL_ZK=(zk-r1 zk-r2 zk-r3)
REPL_NAMES=("${REPL_ETCD[@]}" "${REPL_ZK[@]}")
REPL_PG=(pg-primary pg-sync pg-async)
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
PG_PRIMARY_PORT=$((REPL_OFF + 52492))
PG_SYNC_PORT=$((REPL_OFF + 52493))
PG_ASYNC_PORT=$((REPL_OFF + 52494))

is_replica() { [[ $1 =~ ^((etcd|zk)-r[123]|pg-(primary|sync|async))$ ]]; }

repl_owns() { # repl_owns NAME PID
  local cmd; cmd=$(tr '\0' ' ' <"/proc/$2/cmdline" 2>/dev/null) || return 1
  case $1 in
    etcd-r*) [[ $cmd == *"--data-dir=$(dir_of "$1")/data "* ]] ;;
    zk-r*) [[ $cmd == *"$(dir_of "$1")/zoo.cfg"* ]] ;;
    pg-*) [[ $cmd == *"-D $(dir_of "$1") "* ]] ;;
  esac
}

repl_ready() {
  local p; p=$(port_of "$1")
  case $1 in
    # /health is true once the member sees a leader and a quorum.
    etcd-r*) [[ $(http_get "$p" /health) == *'"health":"true"'* ]] ;;
    zk-r*) [[ $(zk_cmd "$p" srvr) =~ Mode:\ (leader|follower) ]] ;;
    pg-*) timeout 4 "$(pg_bin)/pg_isready" -q -t 3 -h 127.0.0.1 -p "$p" -U postgres -d postgres >/dev/null 2>&1 ;;
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
  zk_spawn "$name" "$dir" "$cp" org.apache.zookeeper.server.quorum.QuorumPeerMain
}

repl_env_text() {
  local n v
  printf 'export SIMBA_BACKENDS_DIR=%q\n' "$BASE"
  printf 'export SIMBA_BACKENDS_SCRIPT=%q\n' "$SCRIPT"
  printf 'export SIMBA_TEST_ETCD_CLUSTER_URL=%q\n' "$(repl_url etcd-cluster)"
  printf 'export SIMBA_TEST_ZK_ENSEMBLE_URL=%q\n' "$(repl_url zk-ensemble)"
  printf 'export SIMBA_TEST_PG_REPLICATED_URL=%q\n' "postgres://postgres@127.0.0.1:$PG_PRIMARY_PORT/simba"
  for n in "${REPL_NAMES[@]}" "${REPL_PG[@]}"; do
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
  reserve_ports
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
  pg_repl_build
  repl_env_text >"$BASE/replicated.env.sh"
  t0=$(((${EPOCHREALTIME/[.,]/} - t0) / 1000))
  log "replicated stores ready in ${t0} ms; leaders: etcd $(repl_leader etcd-cluster), zk $(repl_leader zk-ensemble)"
  repl_env_text
}

cmd_stop_replicated() {
  local n
  [[ -d $BASE ]] || { log "nothing to stop: $BASE does not exist"; return 0; }
  lock
  for n in "${REPL_NAMES[@]}" "${REPL_PG[@]}"; do
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

# --- PostgreSQL: a primary, a synchronous standby, an asynchronous standby ---------------------

spawn_pg_member() { # spawn_pg_member NAME: the server on its data dir (settings in its conf)
  local name=$1 dir old
  dir=$(dir_of "$name")
  old=$(head -n1 "$dir/postmaster.pid" 2>/dev/null | tr -dc '0-9' || true)
  if [[ -f $dir/postmaster.pid ]] && ! alive "$old"; then rm -f "$dir/postmaster.pid"; fi
  # Durable: fsync on, full pages written; no Unix socket (TCP on loopback only).
  spawn "$name" setpriv --reuid=postgres --regid=postgres --init-groups -- \
    "$(pg_bin)/postgres" -D "$dir" -p "$(port_of "$name")" -c listen_addresses=127.0.0.1 \
    -c unix_socket_directories= -c fsync=on -c full_page_writes=on -c max_connections=200 \
    -c wal_level=replica -c max_wal_senders=10 -c hot_standby=on -c wal_receiver_status_interval=1s
}

pg_psql() { # pg_psql NAME SQL -> the answer, unaligned
  "$(pg_bin)/psql" -h 127.0.0.1 -p "$(port_of "$1")" -U postgres -d postgres -XtAq -v ON_ERROR_STOP=1 -c "$2"
}

pg_conninfo() { echo "host=127.0.0.1 port=$1 user=postgres application_name=$2"; }

# Stops the three, then builds them afresh: initdb, the primary started, `simba` created, each
# standby from pg_basebackup of the primary, streaming; waits until both stream (pg-sync as the
# synchronous one).
pg_repl_build() {
  local n dir bin t0=${EPOCHREALTIME/[.,]/} end want='pg_async:async,pg_sync:sync'
  bin=$(pg_bin)
  for n in "${REPL_PG[@]}"; do
    [[ -n $(running_pid "$n") ]] && stop_one "$n"
    end=$((SECONDS + 10))
    while port_open "$(port_of "$n")" && ((SECONDS < end)); do sleep 0.1; done
    port_open "$(port_of "$n")" && die "$n: port $(port_of "$n") is in use"
    dir=$(dir_of "$n")
    [[ -n $dir && $dir == "$BASE"/pg-* ]] || die "$n: bad data dir '$dir'"
    rm -rf "$dir"; mkdir -p "$dir"; chown postgres:postgres "$dir"; chmod 700 "$dir"
  done
  dir=$(dir_of pg-primary)
  (cd / && as_pg "$bin/initdb" -D "$dir" -U postgres -A trust -E UTF8 --locale=C.UTF-8) >>"$(log_of pg-primary)" 2>&1 ||
    fail_server pg-primary "initdb failed"
  # The durable mode: a commit returns once pg_sync has flushed it too.
  printf "synchronous_commit = on\nsynchronous_standby_names = 'pg_sync'\n" >>"$dir/postgresql.auto.conf"
  spawn_pg_member pg-primary; wait_ready pg-primary
  # No standby yet: this one commit waits for none.
  PGOPTIONS='-c synchronous_commit=local' pg_psql pg-primary 'create database simba' >>"$(log_of pg-primary)" 2>&1 ||
    fail_server pg-primary "create database"
  for n in pg-sync pg-async; do
    dir=$(dir_of "$n")
    (cd / && as_pg "$bin/pg_basebackup" -d "$(pg_conninfo "$PG_PRIMARY_PORT" "${n/-/_}")" -D "$dir" -R \
      --checkpoint=fast -X stream) >>"$(log_of "$n")" 2>&1 || fail_server "$n" "pg_basebackup failed"
    # -R wrote standby.signal and primary_conninfo; the standby's own name for the primary.
    echo "primary_conninfo = '$(pg_conninfo "$PG_PRIMARY_PORT" "${n/-/_}")'" >>"$dir/postgresql.auto.conf"
    sed -i '/^synchronous_standby_names/d' "$dir/postgresql.auto.conf"
    chown -R postgres:postgres "$dir"
    spawn_pg_member "$n"
  done
  for n in pg-sync pg-async; do wait_ready "$n"; done
  end=$((SECONDS + 30))
  until [[ $(pg_psql pg-primary "select string_agg(application_name || ':' || sync_state, ',' order by application_name) from pg_stat_replication where state = 'streaming'") == "$want" ]]; do
    ((SECONDS < end)) || fail_server pg-primary "standbys not streaming"
    sleep 0.1
  done
  log "pg-primary, pg-sync (synchronous), pg-async streaming in $(((${EPOCHREALTIME/[.,]/} - t0) / 1000)) ms"
}

# A standby stops receiving WAL: what it has not received by now, it never will. Prints the
# last WAL position it received.
pg_detach() {
  local n=${1:-} end
  [[ $n == pg-sync || $n == pg-async ]] || die "usage: backends.sh pg-detach pg-sync|pg-async"
  pg_psql "$n" "alter system set primary_conninfo = 'host=127.0.0.1 port=1 user=postgres connect_timeout=1'"
  pg_psql "$n" 'select pg_reload_conf()' >/dev/null
  end=$((SECONDS + 10))
  until [[ $(pg_psql "$n" "select count(*) from pg_stat_wal_receiver where status = 'streaming'") == 0 ]]; do
    ((SECONDS < end)) || die "$n: still streaming 10 s after pg-detach"
    sleep 0.05
  done
  pg_psql "$n" 'select pg_last_wal_receive_lsn()'
}

# Promotes a standby (pg_ctl promote) and waits until it accepts writes.
pg_promote_member() {
  local n=${1:-} end
  [[ $n == pg-sync || $n == pg-async ]] || die "usage: backends.sh promote pg-sync|pg-async"
  (cd / && as_pg "$(pg_bin)/pg_ctl" promote -D "$(dir_of "$n")" -w -t 30) >>"$(log_of "$n")" 2>&1 ||
    fail_server "$n" "pg_ctl promote failed"
  end=$((SECONDS + 30))
  until [[ $(pg_psql "$n" 'select pg_is_in_recovery()' 2>/dev/null) == f ]]; do
    ((SECONDS < end)) || fail_server "$n" "still in recovery 30 s after promote"
    sleep 0.05
  done
}
