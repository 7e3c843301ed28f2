#!/usr/bin/env bash
# Private PostgreSQL, MariaDB, Redis, ZooKeeper and etcd instances for simba's tests.
#
#   scripts/backends.sh start            install what is missing, start every server, print exports
#   scripts/backends.sh install          only install what is missing (servers, and protoc for the build)
#   scripts/backends.sh stop [--clean]   stop every server (--clean also deletes the base dir)
#   scripts/backends.sh status           one line per server: name, port, pid, ready
#   scripts/backends.sh env              print the exports: eval "$(scripts/backends.sh env)"
#   scripts/backends.sh restart NAME     (re)start one server, reusing its data dir
#   scripts/backends.sh pid NAME         print the PID of one server (exit 1 if not running)
#   scripts/backends.sh start-replicated  a 3-member etcd cluster, a 3-server ZooKeeper ensemble and a
#                                         PostgreSQL primary + sync + async standby (start-pg-replicated),
#                                         durable (scripts/replicated.sh); stop-replicated, env-replicated,
#                                         leader etcd-cluster|zk-ensemble (the member that leads now)
#
# Servers (NAME): postgres, mysql (MariaDB), redis, redis-evicting, zk, zk-capped, zk-tls, etcd,
# etcd-tls, and for the reliability tests (RELIABILITY.md): redis-persistent (AOF, fsync always),
# redis-mtls and zk-mtls (TLS that requires a client certificate), redis-expired and
# redis-wronghost (TLS with an expired server certificate, with one for another host name).
# Everything listens on 127.0.0.1 only, on non-default ports, so the machine's own services
# (5432, 3306, 6379, 2181, 2379) are never touched. See scripts/README.md.
set -euo pipefail

SCRIPT=$(readlink -f "${BASH_SOURCE[0]}")
REPO=$(cd "$(dirname "$SCRIPT")/.." && pwd -P)
BASE=${SIMBA_BACKENDS_DIR:-$REPO/.backends}
case $BASE in /*) ;; *) BASE=$PWD/$BASE ;; esac
BASE=${BASE%/}

NAMES=(postgres mysql redis redis-evicting zk zk-capped zk-tls etcd etcd-tls redis-persistent redis-mtls zk-mtls
  redis-expired redis-wronghost)

# Ports: env var > ports remembered by the last `start` in this base dir > default.
if [[ -f $BASE/ports.env ]]; then
  # shellcheck disable=SC1091
  . "$BASE/ports.env"
fi
# SIMBA_BACKENDS_PORT_OFFSET shifts every default port (a second set of servers for a second
# checkout on the same machine: SIMBA_BACKENDS_PORT_OFFSET=400 SIMBA_BACKENDS_DIR=/elsewhere).
OFF=${SIMBA_BACKENDS_PORT_OFFSET:-0}
POSTGRES_PORT=${SIMBA_BACKENDS_POSTGRES_PORT:-$((OFF + 55432))}
MYSQL_PORT=${SIMBA_BACKENDS_MYSQL_PORT:-$((OFF + 53306))}
REDIS_PORT=${SIMBA_BACKENDS_REDIS_PORT:-$((OFF + 56379))}
REDIS_EVICTING_PORT=${SIMBA_BACKENDS_REDIS_EVICTING_PORT:-$((OFF + 56380))}
ZK_PORT=${SIMBA_BACKENDS_ZK_PORT:-$((OFF + 52181))}
ZK_CAPPED_PORT=${SIMBA_BACKENDS_ZK_CAPPED_PORT:-$((OFF + 52182))}
# TLS listeners beside the plain ports (PostgreSQL and MariaDB take TLS on their one port).
REDIS_TLS_PORT=${SIMBA_BACKENDS_REDIS_TLS_PORT:-$((OFF + 56443))}
# ZooKeeper with TLS: its own server (Netty), plain port for probes, secureClientPort beside it.
ZK_TLS_PORT=${SIMBA_BACKENDS_ZK_TLS_PORT:-$((OFF + 52443))}
ZK_TLS_SECURE_PORT=${SIMBA_BACKENDS_ZK_TLS_SECURE_PORT:-$((OFF + 52444))}
# etcd: client and peer ports; etcd-tls serves TLS (client certificates) on its client port and
# plain HTTP with password authentication on a second one. No two ports differ by a multiple
# of 100, so that sets shifted by SIMBA_BACKENDS_PORT_OFFSET never collide.
ETCD_PORT=${SIMBA_BACKENDS_ETCD_PORT:-$((OFF + 52379))}
ETCD_PEER_PORT=${SIMBA_BACKENDS_ETCD_PEER_PORT:-$((OFF + 52380))}
ETCD_TLS_PORT=${SIMBA_BACKENDS_ETCD_TLS_PORT:-$((OFF + 52389))}
ETCD_TLS_PEER_PORT=${SIMBA_BACKENDS_ETCD_TLS_PEER_PORT:-$((OFF + 52390))}
ETCD_TLS_AUTH_PORT=${SIMBA_BACKENDS_ETCD_TLS_AUTH_PORT:-$((OFF + 52391))}
# Reliability servers (issue 16): a Redis that persists every write (ServerKill with restart),
# TLS servers that require a client certificate, and TLS servers that present a bad certificate.
REDIS_PERSISTENT_PORT=${SIMBA_BACKENDS_REDIS_PERSISTENT_PORT:-$((OFF + 56387))}
REDIS_MTLS_PORT=${SIMBA_BACKENDS_REDIS_MTLS_PORT:-$((OFF + 56388))}
REDIS_MTLS_TLS_PORT=${SIMBA_BACKENDS_REDIS_MTLS_TLS_PORT:-$((OFF + 56447))}
REDIS_EXPIRED_PORT=${SIMBA_BACKENDS_REDIS_EXPIRED_PORT:-$((OFF + 56389))}
REDIS_EXPIRED_TLS_PORT=${SIMBA_BACKENDS_REDIS_EXPIRED_TLS_PORT:-$((OFF + 56448))}
REDIS_WRONGHOST_PORT=${SIMBA_BACKENDS_REDIS_WRONGHOST_PORT:-$((OFF + 56391))}
REDIS_WRONGHOST_TLS_PORT=${SIMBA_BACKENDS_REDIS_WRONGHOST_TLS_PORT:-$((OFF + 56449))}
ZK_MTLS_PORT=${SIMBA_BACKENDS_ZK_MTLS_PORT:-$((OFF + 52453))}
ZK_MTLS_SECURE_PORT=${SIMBA_BACKENDS_ZK_MTLS_SECURE_PORT:-$((OFF + 52454))}
# The password of the test users (PostgreSQL simba_pw, MariaDB simba_pw, Redis ACL user simba,
# ZooKeeper digest simba, etcd users simba and root); the exported URLs hold it percent-encoded.
TEST_PASSWORD='S3cr3t@pw/8'
TEST_PASSWORD_URL='S3cr3t%40pw%2F8'
ZK_MAX_SESSION_MS=30000
ZK_CAPPED_MAX_SESSION_MS=${SIMBA_BACKENDS_ZK_CAPPED_MAX_SESSION_MS:-3000}
START_TIMEOUT=${SIMBA_BACKENDS_START_TIMEOUT:-60}   # seconds, per server
STOP_TIMEOUT=${SIMBA_BACKENDS_STOP_TIMEOUT:-10}     # seconds before SIGKILL

# The replicated stores' members (etcd-r1..3, zk-r1..3), their ports and commands.
# shellcheck source=scripts/replicated.sh
. "$(dirname "$SCRIPT")/replicated.sh"

log() { printf 'backends: %s\n' "$*" >&2; }
die() { printf 'backends: error: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------------------------------------
# per-server facts

canon() {
  case $1 in
    postgres | postgresql | pg) echo postgres ;;
    mysql | mariadb) echo mysql ;;
    redis) echo redis ;;
    redis-evicting | redis_evicting) echo redis-evicting ;;
    zk | zookeeper) echo zk ;;
    zk-capped | zk_capped | zookeeper-capped) echo zk-capped ;;
    zk-tls | zk_tls | zookeeper-tls) echo zk-tls ;;
    etcd) echo etcd ;;
    etcd-tls | etcd_tls) echo etcd-tls ;;
    redis-persistent | redis_persistent) echo redis-persistent ;;
    redis-mtls | redis_mtls) echo redis-mtls ;;
    redis-expired | redis_expired) echo redis-expired ;;
    redis-wronghost | redis_wronghost) echo redis-wronghost ;;
    zk-mtls | zk_mtls) echo zk-mtls ;;
    etcd-r[123] | zk-r[123] | pg-primary | pg-sync | pg-async) echo "$1" ;;
    *) die "unknown server '$1' (one of: ${NAMES[*]})" ;;
  esac
}
var_of() { local v=${1^^}; echo "${v//-/_}"; } # redis-evicting -> REDIS_EVICTING

# Keeps every port of these servers (the *_PORT variables, replicated members included) out of
# the kernel's ephemeral range, which they lie in (32768-60999 here): a killed server's port
# must still be free when the fault suite restarts it, and an outgoing connection once took a
# killed etcd member's peer port as its source port, so its restart failed with "address
# already in use". Explicit binds are unaffected. Needs root (the test command runs as root);
# without it, says so and goes on.
reserve_ports() {
  local f=/proc/sys/net/ipv4/ip_local_reserved_ports cur want v
  cur=$(cat "$f" 2>/dev/null) || return 0
  want=$(for v in $(compgen -v | grep '_PORT$'); do [[ ${!v} =~ ^[0-9]+$ ]] && echo "${!v}"; done | sort -un | paste -sd, -)
  [[ -n $want ]] || return 0
  if ! echo "${cur:+$cur,}$want" >"$f" 2>/dev/null; then
    log "cannot reserve the servers' ports in $f (not root?): a server restarted by a fault test may find its port taken"
  fi
}
port_of() { local v; v="$(var_of "$1")_PORT"; echo "${!v}"; }
dir_of() { echo "$BASE/$1"; }
pidfile_of() { echo "$BASE/$1.pid"; }
log_of() { echo "$BASE/$1.log"; }

url_of() {
  local p; p=$(port_of "$1")
  case $1 in
    postgres) echo "postgres://postgres@127.0.0.1:$p/simba" ;;
    mysql) echo "mysql://root@127.0.0.1:$p/simba" ;;
    redis | redis-evicting | redis-persistent) echo "redis://127.0.0.1:$p" ;;
    # The mTLS and bad-certificate servers: TLS URLs with the right CA and no client certificate.
    redis-mtls) echo "rediss://127.0.0.1:$REDIS_MTLS_TLS_PORT?ca_file=$(tls_dir)/ca.pem" ;;
    redis-expired) echo "rediss://127.0.0.1:$REDIS_EXPIRED_TLS_PORT?ca_file=$(tls_dir)/ca.pem" ;;
    redis-wronghost) echo "rediss://127.0.0.1:$REDIS_WRONGHOST_TLS_PORT?ca_file=$(tls_dir)/ca.pem" ;;
    zk | zk-capped) echo "zk://127.0.0.1:$p" ;;
    zk-tls) echo "zk://127.0.0.1:$ZK_TLS_SECURE_PORT?tls=true&ca_file=$(tls_dir)/ca.pem" ;;
    zk-mtls) echo "zk://127.0.0.1:$ZK_MTLS_SECURE_PORT?tls=true&ca_file=$(tls_dir)/ca.pem" ;;
    etcd) echo "etcd://127.0.0.1:$p" ;;
    etcd-tls)
      local t; t=$(tls_dir)
      echo "etcd://127.0.0.1:$p?tls=true&ca_file=$t/ca.pem&cert_file=$t/client.pem&key_file=$t/client.key" ;;
  esac
}

short_hash() { printf '%s' "$1" | md5sum | cut -c1-10; }

# Unix socket paths are limited to 107 bytes: use a short /tmp path when the base dir is deep.
pg_sockdir() {
  local d; d=$(dir_of postgres)
  if (( ${#d} + ${#POSTGRES_PORT} + 16 > 100 )); then d=/tmp/simba-pg-$(short_hash "$BASE"); fi
  echo "$d"
}
mysql_socket() {
  local s; s=$(dir_of mysql)/mysqld.sock
  if (( ${#s} > 100 )); then s=/tmp/simba-mysql-$(short_hash "$BASE").sock; fi
  echo "$s"
}

pg_bin() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)
  [[ -n $d && -x $d/postgres ]] || die "postgres: no server binaries under /usr/lib/postgresql/*/bin"
  echo "$d"
}

as_pg() { setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"; }

# ZooKeeper's class path. Debian's zookeeper.jar names its dependencies (zookeeper-jute, netty,
# jackson, slf4j-api, ...) in its manifest Class-Path, so the server runs from it alone; but then
# it logs nothing: the slf4j binding and log4j 1.2 (both pulled by the package) must be added.
zk_classpath() {
  local j cp=/usr/share/java/zookeeper.jar
  [[ -f $cp ]] || return 0
  for j in slf4j-log4j12 log4j-1.2; do
    [[ -f /usr/share/java/$j.jar ]] && cp+=":/usr/share/java/$j.jar"
  done
  echo "$cp"
}

# The zoo.cfg every ZooKeeper server here shares: zoo_cfg DIR CLIENT_PORT MAX_SESSION_MS
# FORCE_SYNC (yes|no). The single servers run with forceSync=no (a process crash loses
# nothing); the replicated members (scripts/replicated.sh) sync.
zoo_cfg() {
  cat <<EOF
tickTime=200
initLimit=10
syncLimit=5
dataDir=$1/data
clientPort=$2
clientPortAddress=127.0.0.1
minSessionTimeout=400
maxSessionTimeout=$3
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=*
forceSync=$4
EOF
}

# Starts a ZooKeeper JVM logging to its console: zk_spawn NAME DIR CLASSPATH MAIN_CLASS
# [JVM_ARGS...], reading DIR/zoo.cfg.
zk_spawn() {
  local name=$1 dir=$2 cp=$3 main=$4
  shift 4
  cat >"$dir/log4j.properties" <<'EOF'
log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{1}: %m%n
EOF
  spawn "$name" java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    -Djava.net.preferIPv4Stack=true -Dlog4j.configuration="file:$dir/log4j.properties" \
    -Dzookeeper.admin.enableServer=false "$@" -cp "$cp" "$main" "$dir/zoo.cfg"
}

tls_dir() { echo "$BASE/tls"; }

# A test CA, a server certificate it signs for localhost and 127.0.0.1, a client certificate,
# and a second "wrong" CA that signed nothing the servers present. Made once per base dir.
gen_certs() {
  local d; d=$(tls_dir)
  [[ -s $d/server.pem && -s $d/wrong-ca.pem && -s $d/client.pem ]] && return 0
  command -v openssl >/dev/null || die "openssl is needed to make the test certificates (apt-get install openssl)"
  rm -rf "$d"; mkdir -p "$d"
  log "tls: generating a test CA and certificates in $d"
  (
    cd "$d"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 3650 -subj "/CN=simba test CA"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout wrong-ca.key -out wrong-ca.pem -days 3650 \
      -subj "/CN=simba wrong CA"
    printf '%s\n' 'subjectAltName=DNS:localhost,IP:127.0.0.1' 'basicConstraints=CA:FALSE' \
      'keyUsage=digitalSignature,keyEncipherment' 'extendedKeyUsage=serverAuth,clientAuth' >server.ext
    openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj "/CN=localhost"
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 3650 \
      -extfile server.ext
    openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr -subj "/CN=simba"
    openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem -days 3650 \
      -extfile server.ext
    chmod 600 ./*.key
  ) >>"$BASE/tls.log" 2>&1 || die "tls: openssl failed (see $BASE/tls.log)"
}

# Server certificates signed by the test CA that a client must refuse: one expired (valid in
# January 2020 only) and one for another host name (other.invalid, not localhost/127.0.0.1).
# Made once per base dir, also in a base dir whose other certificates predate them.
gen_bad_certs() {
  local d; d=$(tls_dir)
  [[ -s $d/expired.pem && -s $d/wronghost.pem ]] && return 0
  (
    cd "$d"
    rm -rf badca; mkdir -p badca; : >badca/index; echo 1000 >badca/serial
    printf '%s\n' '[ca]' 'default_ca=d' '[d]' 'database=badca/index' 'new_certs_dir=badca' \
      'serial=badca/serial' 'default_md=sha256' 'policy=p' 'copy_extensions=none' 'unique_subject=no' \
      '[p]' 'commonName=supplied' '[expired]' 'subjectAltName=DNS:localhost,IP:127.0.0.1' \
      'basicConstraints=CA:FALSE' 'extendedKeyUsage=serverAuth' '[wronghost]' \
      'subjectAltName=DNS:other.invalid' 'basicConstraints=CA:FALSE' 'extendedKeyUsage=serverAuth' >badca.cnf
    openssl req -newkey rsa:2048 -nodes -keyout expired.key -out expired.csr -subj "/CN=localhost"
    openssl ca -batch -config badca.cnf -cert ca.pem -keyfile ca.key -in expired.csr -out expired.pem \
      -extensions expired -startdate 20200101000000Z -enddate 20200201000000Z -notext
    openssl req -newkey rsa:2048 -nodes -keyout wronghost.key -out wronghost.csr -subj "/CN=other.invalid"
    openssl ca -batch -config badca.cnf -cert ca.pem -keyfile ca.key -in wronghost.csr -out wronghost.pem \
      -extensions wronghost -days 3650 -notext
    chmod 600 ./*.key
  ) >>"$BASE/tls.log" 2>&1 || die "tls: openssl failed for the bad certificates (see $BASE/tls.log)"
}

# ---------------------------------------------------------------------------------------------
# processes

# Alive = exists and is not a zombie (a killed orphan stays a zombie until PID 1 reaps it).
alive() {
  local pid=${1:-} st
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  st=$(ps -o stat= -p "$pid" 2>/dev/null) || return 1
  [[ -n $st && $st != Z* ]]
}

# Is PID really this server (and not an unrelated process that reused a stale PID)?
owns() {
  local name=$1 pid=$2 cmd marker
  if is_replica "$name"; then repl_owns "$name" "$pid"; return; fi
  cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
  case $name in
    postgres) marker="-D $(dir_of postgres)" ;;
    mysql) marker="--datadir=$(dir_of mysql)" ;;
    redis | redis-evicting | redis-persistent | redis-mtls | redis-expired | redis-wronghost) marker=":$(port_of "$name")" ;;
    zk | zk-capped | zk-tls | zk-mtls) marker="$(dir_of "$name")/zoo.cfg" ;;
    etcd | etcd-tls) marker="--data-dir=$(dir_of "$name")/data " ;;
  esac
  [[ $cmd == *"$marker"* ]]
}

read_pid() {
  local f; f=$(pidfile_of "$1")
  [[ -f $f ]] && tr -dc '0-9' <"$f" || true
}

# PID of the running server, or nothing.
running_pid() {
  local pid; pid=$(read_pid "$1")
  if alive "$pid" && owns "$1" "$pid"; then echo "$pid"; fi
}

port_open() { timeout 1 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$1" 2>/dev/null; }

http_get() { # http_get PORT PATH -> the HTTP response (status line, headers, body)
  timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" &&
    printf "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n" "$2" >&3 && cat <&3' _ "$1" "$2" 2>/dev/null
}

zk_cmd() { # zk_cmd PORT WORD -> the 4-letter-word answer
  timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf %s "$2" >&3 && cat <&3' _ "$1" "$2" 2>/dev/null
}

ready() {
  local name=$1 p; p=$(port_of "$1")
  if is_replica "$name"; then repl_ready "$name"; return; fi
  case $name in
    postgres)
      timeout 4 "$(pg_bin)/pg_isready" -q -t 3 -h 127.0.0.1 -p "$p" -U postgres -d postgres >/dev/null 2>&1 ;;
    mysql)
      timeout 4 mariadb-admin --no-defaults --protocol=tcp -h 127.0.0.1 -P "$p" -u root \
        --connect-timeout=3 ping >/dev/null 2>&1 ;;
    redis | redis-evicting | redis-persistent | redis-mtls | redis-expired | redis-wronghost)
      [[ $(timeout 3 redis-cli -h 127.0.0.1 -p "$p" ping 2>/dev/null) == PONG ]] ;;
    zk | zk-capped | zk-tls | zk-mtls)
      [[ $(zk_cmd "$p" srvr) == *"Mode: standalone"* ]] ;;
    etcd) [[ $(http_get "$p" /health) == *'"health":"true"'* ]] ;;
    etcd-tls) [[ $(http_get "$ETCD_TLS_AUTH_PORT" /health) == *'"health":"true"'* ]] ;;
  esac
}

# Processes whose working directory is the PG data dir: the postmaster's children that may
# outlive a kill -9 of the postmaster for a moment, and would block a new postmaster.
pg_leftovers() {
  local d p; d=$(dir_of postgres)
  for p in $(pgrep -u postgres -x postgres || true); do
    [[ $(readlink "/proc/$p/cwd" 2>/dev/null) == "$d" ]] || continue
    alive "$p" && echo "$p"
  done
  return 0
}

wait_gone() { # wait_gone SECONDS PID...
  local end=$((SECONDS + $1)) p left; shift
  while :; do
    left=0
    for p in "$@"; do alive "$p" && left=1; done
    ((left == 0)) && return 0
    ((SECONDS >= end)) && return 1
    sleep 0.05
  done
}

stop_one() {
  local name=$1 pid sig=TERM others=()
  pid=$(running_pid "$name")
  [[ $name == postgres || $name == pg-* ]] && sig=INT  # fast shutdown; SIGTERM waits for clients
  if [[ -n $pid ]]; then
    kill -s "$sig" "$pid" 2>/dev/null || true
    kill -s CONT "$pid" 2>/dev/null || true  # a SIGSTOPped server must wake up to exit
    if ! wait_gone "$STOP_TIMEOUT" "$pid"; then
      log "$name (pid $pid) ignored SIG$sig for ${STOP_TIMEOUT}s: SIGKILL"
      kill -s KILL "$pid" 2>/dev/null || true
      wait_gone 5 "$pid" || log "$name (pid $pid) still there after SIGKILL"
    fi
    wait "$pid" 2>/dev/null || true  # reaps it if it happens to be our child
  fi
  if [[ $name == postgres ]]; then
    mapfile -t others < <(pg_leftovers)
    if ((${#others[@]})); then
      wait_gone 5 "${others[@]}" || { kill -s KILL "${others[@]}" 2>/dev/null || true; wait_gone 5 "${others[@]}" || true; }
    fi
  fi
  rm -f "$(pidfile_of "$name")"
}

# ---------------------------------------------------------------------------------------------
# starting

# Detach: new session, immune to SIGHUP, no inherited lock fd; `setsid` and `setpriv` exec, so
# $! is the server's own PID (the background child is never a process-group leader here).
spawn() { # spawn NAME CMD...
  local name=$1; shift
  local logf; logf=$(log_of "$name")
  printf '\n=== %s start %s\n' "$(date '+%F %T')" "$name" >>"$logf"
  (cd / && exec setsid nohup "$@" >>"$logf" 2>&1 </dev/null 9>&-) &
  echo $! >"$(pidfile_of "$name")"
}

spawn_postgres() {
  local bin dir sock port=$POSTGRES_PORT logf old
  bin=$(pg_bin); dir=$(dir_of postgres); sock=$(pg_sockdir); logf=$(log_of postgres)
  if [[ ! -s $dir/PG_VERSION ]]; then
    rm -rf "$dir"; mkdir -p "$dir"; chown postgres:postgres "$dir"; chmod 700 "$dir"
    log "postgres: initdb $dir"
    (cd / && as_pg "$bin/initdb" -D "$dir" -U postgres -A trust -E UTF8 --locale=C.UTF-8 --no-sync) \
      >>"$logf" 2>&1 || return 1
  fi
  chown -R postgres:postgres "$dir"
  as_pg test -w "$dir/PG_VERSION" ||
    die "postgres: user postgres cannot reach $dir (a parent dir is not traversable); set SIMBA_BACKENDS_DIR"
  if [[ $sock != "$dir" ]]; then mkdir -p "$sock"; chown postgres:postgres "$sock"; chmod 700 "$sock"; fi
  # TLS on the same port (clients choose; plain connections still work), and a password user.
  install -o postgres -g postgres -m 600 "$(tls_dir)/server.key" "$dir/simba-server.key"
  install -o postgres -g postgres -m 644 "$(tls_dir)/server.pem" "$dir/simba-server.pem"
  if ! grep -q '^host all simba_pw ' "$dir/pg_hba.conf"; then
    sed -i '1i host all simba_pw 0.0.0.0/0 scram-sha-256' "$dir/pg_hba.conf"
  fi
  # The user simba must present a client certificate the test CA signed, for its own name (mutual
  # TLS, issue 16); other users are as before (the CA file only lets the server verify one).
  if ! grep -q '^hostssl all simba ' "$dir/pg_hba.conf"; then
    sed -i -e '1i hostssl all simba 0.0.0.0/0 trust clientcert=verify-full' \
      -e '1i hostnossl all simba 0.0.0.0/0 reject' "$dir/pg_hba.conf"
  fi
  install -o postgres -g postgres -m 644 "$(tls_dir)/ca.pem" "$dir/simba-ca.pem"
  # After a kill -9: stale lock files whose PID is dead (or a zombie, which fools postgres).
  old=$(head -n1 "$dir/postmaster.pid" 2>/dev/null | tr -dc '0-9' || true)
  if [[ -f $dir/postmaster.pid ]] && ! alive "$old"; then
    rm -f "$dir/postmaster.pid" "$sock/.s.PGSQL.$port" "$sock/.s.PGSQL.$port.lock"
  fi
  spawn postgres setpriv --reuid=postgres --regid=postgres --init-groups -- \
    "$bin/postgres" -D "$dir" -p "$port" -c listen_addresses=127.0.0.1 \
    -c unix_socket_directories="$sock" -c fsync=off -c synchronous_commit=off \
    -c full_page_writes=off -c max_connections=500 -c ssl=on \
    -c ssl_cert_file="$dir/simba-server.pem" -c ssl_key_file="$dir/simba-server.key" \
    -c ssl_ca_file="$dir/simba-ca.pem"
}

spawn_mysql() {
  local dir sock logf
  dir=$(dir_of mysql); sock=$(mysql_socket); logf=$(log_of mysql)
  if [[ ! -d $dir/mysql ]]; then
    rm -rf "$dir"; mkdir -p "$dir"
    log "mysql: mariadb-install-db $dir"
    (cd / && mariadb-install-db --no-defaults --datadir="$dir" --user=root \
      --auth-root-authentication-method=normal --skip-test-db --skip-name-resolve \
      --innodb-log-file-size=16M) >>"$logf" 2>&1 || return 1
  fi
  rm -f "$sock" "$sock.lock"  # stale after a kill -9 (we checked the port is free)
  spawn mysql mariadbd --no-defaults --datadir="$dir" --port="$MYSQL_PORT" \
    --bind-address=127.0.0.1 --socket="$sock" --pid-file="$dir/mariadbd.pid" --user=root \
    --character-set-server=utf8mb4 --collation-server=utf8mb4_unicode_ci \
    --skip-name-resolve --innodb-log-file-size=16M --innodb-buffer-pool-size=64M \
    --innodb-flush-log-at-trx-commit=2 --innodb-doublewrite=0 --max-connections=300 \
    --ssl-cert="$(tls_dir)/server.pem" --ssl-key="$(tls_dir)/server.key" --ssl-ca="$(tls_dir)/ca.pem"
}

spawn_redis() { # spawn_redis NAME EXTRA...
  local name=$1 dir; shift
  dir=$(dir_of "$name"); mkdir -p "$dir"
  spawn "$name" redis-server --port "$(port_of "$name")" --bind 127.0.0.1 --save '' \
    --appendonly no --dir "$dir" --logfile '' --daemonize no "$@"
}

spawn_zk() { # spawn_zk NAME MAX_SESSION_MS [JVM OPTIONS...]
  local name=$1 max=$2 dir cp
  shift 2
  dir=$(dir_of "$name"); mkdir -p "$dir/data"
  cp=$(zk_classpath)
  [[ -n $cp ]] || die "$name: /usr/share/java/zookeeper.jar not found"
  # The Netty server needs netty-codec, which zookeeper.jar's manifest does not name.
  if [[ $name == zk-tls || $name == zk-mtls ]]; then cp+=":/usr/share/java/netty-codec.jar"; fi
  zoo_cfg "$dir" "$(port_of "$name")" "$max" no >"$dir/zoo.cfg"
  if [[ $name == zk-tls ]]; then
    printf 'secureClientPort=%s\nsecureClientPortAddress=127.0.0.1\n' "$ZK_TLS_SECURE_PORT" >>"$dir/zoo.cfg"
  fi
  if [[ $name == zk-mtls ]]; then
    printf 'secureClientPort=%s\nsecureClientPortAddress=127.0.0.1\n' "$ZK_MTLS_SECURE_PORT" >>"$dir/zoo.cfg"
  fi
  zk_spawn "$name" "$dir" "$cp" org.apache.zookeeper.server.ZooKeeperServerMain "$@"
}

spawn_etcd() { # spawn_etcd NAME
  local name=$1 dir peer t clients advertise tls=()
  dir=$(dir_of "$name"); t=$(tls_dir); mkdir -p "$dir"
  if [[ $name == etcd ]]; then
    peer=$ETCD_PEER_PORT; clients="http://127.0.0.1:$ETCD_PORT"; advertise=$clients
  else
    # TLS with client certificates (the common name is the user) on the client port, and
    # plain HTTP for password users on a second port.
    peer=$ETCD_TLS_PEER_PORT; advertise="https://127.0.0.1:$ETCD_TLS_PORT"
    clients="$advertise,http://127.0.0.1:$ETCD_TLS_AUTH_PORT"
    tls=(--cert-file="$t/server.pem" --key-file="$t/server.key" --trusted-ca-file="$t/ca.pem" --client-cert-auth)
  fi
  # Heartbeat 50 ms and election timeout 500 ms make the smallest lease TTL 1 s (etcd's is
  # 1.5 election timeouts, rounded up to whole seconds: 2 s with its defaults), below the
  # tests' 1.5 s leases. --unsafe-no-fsync: a test server (a kill -9 keeps what the kernel has).
  spawn "$name" etcd --name "$name" --data-dir="$dir/data" --logger=zap --log-outputs=stderr \
    --listen-client-urls "$clients" --advertise-client-urls "$advertise" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "$name=http://127.0.0.1:$peer" --initial-cluster-state new \
    --initial-cluster-token "simba-$name" --heartbeat-interval=50 --election-timeout=500 \
    --unsafe-no-fsync "${tls[@]}"
}

# etcd-tls: users root and simba (password TEST_PASSWORD), a role simba with read and write on
# the prefix `simba` (the default key prefix and the tests' own prefixes), then authentication
# on. Skipped once root can log in (authentication is on already).
etcd_auth_setup() {
  local e=(etcdctl --endpoints="http://127.0.0.1:$ETCD_TLS_AUTH_PORT" --dial-timeout=3s --command-timeout=5s)
  "${e[@]}" --user="root:$TEST_PASSWORD" user get simba >/dev/null 2>&1 && return 0
  {
    "${e[@]}" user add root --new-user-password="$TEST_PASSWORD" || true
    "${e[@]}" user grant-role root root || true
    "${e[@]}" role add simba || true
    "${e[@]}" role grant-permission simba --prefix=true readwrite simba
    "${e[@]}" user add simba --new-user-password="$TEST_PASSWORD" || true
    "${e[@]}" user grant-role simba simba
    "${e[@]}" auth enable
  } >>"$(log_of etcd-tls)" 2>&1 || fail_server etcd-tls "could not set up users and authentication"
}

spawn_one() {
  local name=$1 port end; port=$(port_of "$name")
  # A server killed with SIGKILL just before (the fault suite's ServerKill) may still be exiting:
  # the kernel frees its memory before its sockets, and its /proc cmdline is already empty, so
  # running_pid no longer sees it while its port still answers. Give it a few seconds to go.
  end=$((SECONDS + 10))
  while port_open "$port" && ((SECONDS < end)); do sleep 0.1; done
  if port_open "$port"; then
    die "$name: port $port is already in use by another process: $(ss -ltnpH "sport = :$port" 2>/dev/null | tr -s ' ')"
  fi
  if [[ $name == postgres ]]; then
    local others=(); mapfile -t others < <(pg_leftovers)
    if ((${#others[@]})); then
      wait_gone 5 "${others[@]}" || { kill -s KILL "${others[@]}" 2>/dev/null || true; wait_gone 5 "${others[@]}" || true; }
    fi
  fi
  case $name in
    postgres) spawn_postgres ;;
    mysql) spawn_mysql ;;
    redis)
      local t; t=$(tls_dir)
      spawn_redis redis --maxmemory-policy noeviction --tls-port "$REDIS_TLS_PORT" --tls-cert-file "$t/server.pem" \
        --tls-key-file "$t/server.key" --tls-ca-cert-file "$t/ca.pem" --tls-auth-clients optional ;;
    redis-evicting) spawn_redis redis-evicting --maxmemory 64mb --maxmemory-policy allkeys-lru ;;
    zk) spawn_zk zk "$ZK_MAX_SESSION_MS" ;;
    zk-capped) spawn_zk zk-capped "$ZK_CAPPED_MAX_SESSION_MS" ;;
    zk-tls)
      # Java reads PEM key stores (key and certificate in one file) since ZooKeeper 3.5.
      local t; t=$(tls_dir); mkdir -p "$(dir_of zk-tls)"
      cat "$t/server.key" "$t/server.pem" >"$(dir_of zk-tls)/keystore.pem"; chmod 600 "$(dir_of zk-tls)/keystore.pem"
      spawn_zk zk-tls "$ZK_MAX_SESSION_MS" \
        -Dzookeeper.serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory \
        -Dzookeeper.ssl.keyStore.location="$(dir_of zk-tls)/keystore.pem" -Dzookeeper.ssl.keyStore.type=PEM \
        -Dzookeeper.ssl.trustStore.location="$t/ca.pem" -Dzookeeper.ssl.trustStore.type=PEM \
        -Dzookeeper.ssl.clientAuth=none ;;
    etcd | etcd-tls) spawn_etcd "$name" ;;
    etcd-r[123]) spawn_etcd_member "$name" ;;
    zk-r[123]) spawn_zk_member "$name" ;;
    # Every write appended and fsynced before the reply: a kill -9 loses no token.
    redis-persistent) spawn_redis redis-persistent --maxmemory-policy noeviction --appendonly yes --appendfsync always ;;
    redis-mtls)
      local t; t=$(tls_dir)
      spawn_redis redis-mtls --tls-port "$REDIS_MTLS_TLS_PORT" --tls-cert-file "$t/server.pem" \
        --tls-key-file "$t/server.key" --tls-ca-cert-file "$t/ca.pem" --tls-auth-clients yes ;;
    redis-expired | redis-wronghost)
      local t b=${name#redis-} tp; t=$(tls_dir)
      tp=$REDIS_EXPIRED_TLS_PORT; [[ $name == redis-wronghost ]] && tp=$REDIS_WRONGHOST_TLS_PORT
      spawn_redis "$name" --tls-port "$tp" --tls-cert-file "$t/$b.pem" --tls-key-file "$t/$b.key" \
        --tls-ca-cert-file "$t/ca.pem" --tls-auth-clients no ;;
    zk-mtls)
      local t; t=$(tls_dir); mkdir -p "$(dir_of zk-mtls)"
      cat "$t/server.key" "$t/server.pem" >"$(dir_of zk-mtls)/keystore.pem"; chmod 600 "$(dir_of zk-mtls)/keystore.pem"
      spawn_zk zk-mtls "$ZK_MAX_SESSION_MS" \
        -Dzookeeper.serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory \
        -Dzookeeper.ssl.keyStore.location="$(dir_of zk-mtls)/keystore.pem" -Dzookeeper.ssl.keyStore.type=PEM \
        -Dzookeeper.ssl.trustStore.location="$t/ca.pem" -Dzookeeper.ssl.trustStore.type=PEM \
        -Dzookeeper.ssl.clientAuth=need ;;
  esac
}

fail_server() { # fail_server NAME MESSAGE
  local logf; logf=$(log_of "$1")
  {
    printf 'backends: error: %s: %s\n' "$1" "$2"
    if [[ -f $logf ]]; then
      printf -- '--- last 30 lines of %s ---\n' "$logf"
      tail -n 30 "$logf"
      printf -- '---\n'
    fi
  } >&2
  exit 1
}

wait_ready() {
  local name=$1 pid end=$((SECONDS + START_TIMEOUT))
  while :; do
    ready "$name" && return 0
    pid=$(read_pid "$name")
    alive "$pid" || fail_server "$name" "exited before it was ready (port $(port_of "$name"))"
    ((SECONDS >= end)) && fail_server "$name" "not ready after ${START_TIMEOUT}s (pid $pid, port $(port_of "$name"))"
    sleep 0.05
  done
}

post_start() {
  local p; p=$(port_of "$1")
  case $1 in
    postgres)
      if [[ $("$(pg_bin)/psql" -h 127.0.0.1 -p "$p" -U postgres -d postgres -XtAc \
        "select 1 from pg_database where datname = 'simba'" 2>>"$(log_of postgres)") != 1 ]]; then
        "$(pg_bin)/psql" -h 127.0.0.1 -p "$p" -U postgres -d postgres -Xq -v ON_ERROR_STOP=1 \
          -c 'create database simba' >>"$(log_of postgres)" 2>&1 ||
          fail_server postgres "could not create database simba"
      fi
      "$(pg_bin)/psql" -h 127.0.0.1 -p "$p" -U postgres -d postgres -Xq -v ON_ERROR_STOP=1 -c \
        "do \$\$ begin if not exists (select 1 from pg_roles where rolname = 'simba_pw') then
           create role simba_pw login superuser password '$TEST_PASSWORD'; end if;
           if not exists (select 1 from pg_roles where rolname = 'simba') then
           create role simba login superuser; end if; end \$\$" \
        >>"$(log_of postgres)" 2>&1 || fail_server postgres "could not create users simba_pw and simba" ;;
    mysql)
      mariadb --no-defaults --protocol=tcp -h 127.0.0.1 -P "$p" -u root \
        -e "CREATE DATABASE IF NOT EXISTS simba CHARACTER SET utf8mb4;
            CREATE USER IF NOT EXISTS 'simba_pw'@'%' IDENTIFIED BY '$TEST_PASSWORD';
            GRANT ALL ON simba.* TO 'simba_pw'@'%';
            CREATE USER IF NOT EXISTS 'simba_x509'@'%' REQUIRE X509;
            GRANT ALL ON simba.* TO 'simba_x509'@'%'" >>"$(log_of mysql)" 2>&1 ||
        fail_server mysql "could not create database simba" ;;
    redis)
      [[ $(redis-cli -h 127.0.0.1 -p "$p" ACL SETUSER simba reset on ">$TEST_PASSWORD" '~*' '&*' '+@all' 2>&1) == OK ]] ||
        fail_server redis "could not create the ACL user simba" ;;
    etcd-tls) etcd_auth_setup ;;
  esac
}

install_missing() {
  local pkgs=()
  compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null &&
    compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || pkgs+=(postgresql)
  command -v mariadbd >/dev/null && command -v mariadb-install-db >/dev/null || pkgs+=(mariadb-server)
  command -v mariadb >/dev/null && command -v mariadb-admin >/dev/null || pkgs+=(mariadb-client)
  command -v redis-server >/dev/null || pkgs+=(redis-server)
  command -v redis-cli >/dev/null || pkgs+=(redis-tools)
  dpkg -s zookeeper >/dev/null 2>&1 && [[ -f /usr/share/java/zookeeper.jar ]] || pkgs+=(zookeeper)
  command -v java >/dev/null || pkgs+=(default-jre-headless)
  command -v etcd >/dev/null || pkgs+=(etcd-server)
  command -v etcdctl >/dev/null || pkgs+=(etcd-client)
  # Not a server: the etcd-client crate's build script runs protoc, which needs the
  # well-known .proto files of libprotobuf-dev (only recommended by protobuf-compiler).
  command -v protoc >/dev/null || pkgs+=(protobuf-compiler)
  [[ -f /usr/include/google/protobuf/descriptor.proto ]] || pkgs+=(libprotobuf-dev)
  command -v setpriv >/dev/null || pkgs+=(util-linux)
  command -v ps >/dev/null || pkgs+=(procps)
  # Not a server: the fault suite's clock-rate skew runs (SIMBA_FAULT_CLOCK_RATE) start the
  # node processes under libfaketime's LD_PRELOAD library.
  compgen -G '/usr/lib/*/faketime/libfaketime.so.1' >/dev/null || pkgs+=(libfaketime)
  # Not a server: scripts/check_spec.py reads deploy/ and scripts/docker-compose.yml with PyYAML.
  python3 -c 'import yaml' 2>/dev/null || pkgs+=(python3-yaml)
  command -v faketime >/dev/null || pkgs+=(faketime)
  ((${#pkgs[@]})) || return 0
  ((EUID == 0)) || die "missing packages (${pkgs[*]}) and not root: install them first"
  log "installing: ${pkgs[*]}"
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${pkgs[@]}" >&2
}

lock() {
  mkdir -p "$BASE"
  exec 9>"$BASE/.lock"
  flock -w 300 9 || die "another backends.sh holds $BASE/.lock"
}

write_ports() {
  local n v
  {
    for n in "${NAMES[@]}"; do
      v=SIMBA_BACKENDS_$(var_of "$n")_PORT
      printf '%s=${%s:-%s}\n' "$v" "$v" "$(port_of "$n")"
    done
    printf '%s=${%s:-%s}\n' SIMBA_BACKENDS_REDIS_TLS_PORT SIMBA_BACKENDS_REDIS_TLS_PORT "$REDIS_TLS_PORT"
    printf '%s=${%s:-%s}\n' SIMBA_BACKENDS_ZK_TLS_SECURE_PORT SIMBA_BACKENDS_ZK_TLS_SECURE_PORT "$ZK_TLS_SECURE_PORT"
    for v in ETCD_PEER_PORT ETCD_TLS_PEER_PORT ETCD_TLS_AUTH_PORT REDIS_MTLS_TLS_PORT REDIS_EXPIRED_TLS_PORT \
      REDIS_WRONGHOST_TLS_PORT ZK_MTLS_SECURE_PORT; do
      printf '%s=${%s:-%s}\n' "SIMBA_BACKENDS_$v" "SIMBA_BACKENDS_$v" "${!v}"
    done
  } >"$BASE/ports.env"
}

env_text() {
  local n v
  printf 'export SIMBA_BACKENDS_DIR=%q\n' "$BASE"
  printf 'export SIMBA_BACKENDS_SCRIPT=%q\n' "$SCRIPT"
  for n in "${NAMES[@]}"; do
    v=SIMBA_TEST_$(var_of "$n")
    printf 'export %s_URL=%q\n' "$v" "$(url_of "$n")"
    printf 'export %s_PORT=%q\n' "$v" "$(port_of "$n")"
    printf 'export %s_PIDFILE=%q\n' "$v" "$(pidfile_of "$n")"
    printf 'export %s_DATADIR=%q\n' "$v" "$(dir_of "$n")"
    printf 'export %s_LOG=%q\n' "$v" "$(log_of "$n")"
  done
  printf 'export SIMBA_TEST_ZK_MAX_SESSION_MS=%q\n' "$ZK_MAX_SESSION_MS"
  printf 'export SIMBA_TEST_ZK_CAPPED_MAX_SESSION_MS=%q\n' "$ZK_CAPPED_MAX_SESSION_MS"
  # Security tests (README "Security", ADR 0008).
  local t ca; t=$(tls_dir); ca=$t/ca.pem
  printf 'export SIMBA_TEST_TLS_DIR=%q\n' "$t"
  printf 'export SIMBA_TEST_TLS_CA=%q\n' "$ca"
  printf 'export SIMBA_TEST_TLS_WRONG_CA=%q\n' "$t/wrong-ca.pem"
  printf 'export SIMBA_TEST_PASSWORD=%q\n' "$TEST_PASSWORD"
  printf 'export SIMBA_TEST_POSTGRES_TLS_URL=%q\n' \
    "postgres://postgres@127.0.0.1:$POSTGRES_PORT/simba?sslmode=verify-full&sslrootcert=$ca"
  printf 'export SIMBA_TEST_POSTGRES_AUTH_URL=%q\n' "postgres://simba_pw:$TEST_PASSWORD_URL@127.0.0.1:$POSTGRES_PORT/simba"
  printf 'export SIMBA_TEST_MYSQL_TLS_URL=%q\n' \
    "mysql://root@127.0.0.1:$MYSQL_PORT/simba?ssl-mode=VERIFY_IDENTITY&ssl-ca=$ca"
  printf 'export SIMBA_TEST_MYSQL_AUTH_URL=%q\n' "mysql://simba_pw:$TEST_PASSWORD_URL@127.0.0.1:$MYSQL_PORT/simba"
  printf 'export SIMBA_TEST_REDIS_TLS_URL=%q\n' "rediss://127.0.0.1:$REDIS_TLS_PORT?ca_file=$ca"
  printf 'export SIMBA_TEST_REDIS_AUTH_URL=%q\n' "redis://simba:$TEST_PASSWORD_URL@127.0.0.1:$REDIS_PORT"
  printf 'export SIMBA_TEST_ZK_AUTH_URL=%q\n' "zk://simba:$TEST_PASSWORD_URL@127.0.0.1:$ZK_PORT"
  # Mutual TLS (issue 16): URLs without the client certificate, which the test adds
  # (SIMBA_TEST_TLS_DIR/client.pem, client.key; its common name is simba).
  printf 'export SIMBA_TEST_POSTGRES_MTLS_URL=%q\n' \
    "postgres://simba@127.0.0.1:$POSTGRES_PORT/simba?sslmode=verify-full&sslrootcert=$ca"
  printf 'export SIMBA_TEST_MYSQL_MTLS_URL=%q\n' \
    "mysql://simba_x509@127.0.0.1:$MYSQL_PORT/simba?ssl-mode=VERIFY_IDENTITY&ssl-ca=$ca"
  printf 'export SIMBA_TEST_ETCD_AUTH_URL=%q\n' "etcd://simba:$TEST_PASSWORD_URL@127.0.0.1:$ETCD_TLS_AUTH_PORT"
}

# ---------------------------------------------------------------------------------------------
# commands

cmd_start() {
  local n pid t0=${EPOCHREALTIME/[.,]/} to_spawn=() jobs=() i
  install_missing
  lock
  touch "$BASE/.simba-backends"
  reserve_ports
  gen_certs
  gen_bad_certs
  for n in "${NAMES[@]}"; do
    pid=$(running_pid "$n")
    if [[ -n $pid ]]; then
      kill -s CONT "$pid" 2>/dev/null || true  # left SIGSTOPped by a test?
      if ready "$n"; then log "$n: already running (pid $pid)"; continue; fi
      log "$n: pid $pid is not answering: restarting it"
      stop_one "$n"
    fi
    to_spawn+=("$n")
  done
  # Spawn in parallel (initdb and mariadb-install-db take seconds), then wait for each.
  for n in "${to_spawn[@]}"; do
    (spawn_one "$n") &
    jobs+=($!)
  done
  local failed=""
  for i in "${!to_spawn[@]}"; do
    wait "${jobs[$i]}" || failed=${failed:-${to_spawn[$i]}}
  done
  [[ -z $failed ]] || fail_server "$failed" "could not be started"
  for n in "${to_spawn[@]}"; do
    wait_ready "$n"
    log "$n: ready on 127.0.0.1:$(port_of "$n") (pid $(read_pid "$n"))"
  done
  post_start postgres
  post_start mysql
  post_start redis
  post_start etcd-tls
  write_ports  # only now: a failed start with a bad port override is not remembered
  env_text >"$BASE/env.sh"
  t0=$(( (${EPOCHREALTIME/[.,]/} - t0) / 1000 ))
  log "all servers ready in $((t0 / 1000)).$(printf %03d $((t0 % 1000)))s; exports in $BASE/env.sh"
  env_text
}

cmd_restart() {
  local n; n=$(canon "${1:?usage: backends.sh restart NAME}")
  lock
  gen_certs
  gen_bad_certs
  stop_one "$n"
  (spawn_one "$n") || fail_server "$n" "could not be started"
  wait_ready "$n"
  post_start "$n"
  log "$n: restarted, ready on 127.0.0.1:$(port_of "$n") (pid $(read_pid "$n"))"
}

cmd_stop() {
  local n clean=0
  [[ ${1:-} == --clean ]] && clean=1
  [[ -d $BASE ]] || { log "nothing to stop: $BASE does not exist"; return 0; }
  lock
  for n in "${NAMES[@]}" "${REPL_NAMES[@]}" "${REPL_PG[@]}"; do
    if [[ -n $(running_pid "$n") ]]; then
      (stop_one "$n"; log "$n: stopped") &
    else
      rm -f "$(pidfile_of "$n")"
    fi
  done
  wait
  if ((clean)); then
    [[ -f $BASE/.simba-backends && $BASE != "$REPO" && $BASE != / ]] ||
      die "refusing to delete $BASE (no .simba-backends marker)"
    case $(pg_sockdir) in "$BASE"/*) ;; *) rm -rf "$(pg_sockdir)" ;; esac
    case $(mysql_socket) in "$BASE"/*) ;; *) rm -f "$(mysql_socket)" "$(mysql_socket).lock" ;; esac
    rm -rf "$BASE"
    log "removed $BASE"
  fi
}

cmd_status() {
  local n pid r st
  printf '%-15s %-6s %-8s %s\n' NAME PORT PID READY
  for n in "${NAMES[@]}" "${REPL_NAMES[@]}" "${REPL_PG[@]}"; do
    pid=$(running_pid "$n")
    r=no
    if [[ -n $pid ]]; then
      st=$(ps -o stat= -p "$pid" 2>/dev/null || true)
      if [[ $st == T* ]]; then r="no (stopped: SIGSTOP)"; elif ready "$n"; then r=yes; fi
    fi
    printf '%-15s %-6s %-8s %s\n' "$n" "$(port_of "$n")" "${pid:--}" "$r"
  done
}

cmd_pid() {
  local n pid; n=$(canon "${1:?usage: backends.sh pid NAME}")
  pid=$(running_pid "$n")
  [[ -n $pid ]] || { log "$n is not running"; return 1; }
  echo "$pid"
}

cmd_env() {
  if [[ -f $BASE/env.sh ]]; then cat "$BASE/env.sh"; else env_text; fi
}

case ${1:-} in
  start) cmd_start ;;
  install) install_missing ;;
  stop) cmd_stop "${2:-}" ;;
  status) cmd_status ;;
  env) cmd_env ;;
  restart) cmd_restart "${2:-}" ;;
  pid) cmd_pid "${2:-}" ;;
  start-replicated) cmd_start_replicated ;;
  stop-replicated) cmd_stop_replicated ;;
  env-replicated) if [[ -f $BASE/replicated.env.sh ]]; then cat "$BASE/replicated.env.sh"; else repl_env_text; fi ;;
  leader) repl_leader "${2:-}" ;;
  start-pg-replicated) install_missing; lock; pg_repl_build; repl_env_text ;;
  pg-detach) pg_detach "${2:-}" ;;
  promote) pg_promote_member "${2:-}" ;;
  *)
    sed -n '2,18p' "$SCRIPT" | sed 's/^# \{0,1\}//' >&2
    exit 2 ;;
esac
