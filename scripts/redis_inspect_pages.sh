#!/usr/bin/env bash
# Rule O13's figure: how long the Redis dashboard's read blocks the server on a store with many
# lease keys, in pages (what `inspect` does: SCAN COUNT 1000 per script call) against one
# script over the whole key space (the same script with one page as large as the store, which
# is what `inspect` did before). Prints the pages, the mean server time per call and the
# longest server-side command (Redis LATENCY LATEST), for each.
#
#   bash scripts/redis_inspect_pages.sh [KEYS]        (default 1000000; needs the test servers:
#                                                      eval "$(bash scripts/backends.sh start)")
#
# It writes KEYS hashes under the prefix `o13-measure:` on SIMBA_TEST_REDIS_URL and deletes
# them afterwards, and changes that server's latency-monitor threshold during the run.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1000000}
U=${SIMBA_TEST_REDIS_URL:?start the test servers first: eval \"\$(bash scripts/backends.sh start)\"}
P=o13-measure:
lua=$(mktemp)
trap 'rm -f "$lua"; redis-cli -u "$U" CONFIG SET latency-monitor-threshold 0 >/dev/null' EXIT
# The script as the library holds it (the raw string of simba/src/backend/redis/inspect.rs).
python3 - "$lua" <<'PY'
import sys
src = open("simba/src/backend/redis/inspect.rs").read()
a = src.index('r"\n') + 3
open(sys.argv[1], "w").write(src[a:src.index('";', a)])
PY
for ((i = 0; i < N; i += 100000)); do
  redis-cli -u "$U" EVAL "for i = tonumber(ARGV[2]), math.min(tonumber(ARGV[2]) + 99999, tonumber(ARGV[3]) - 1) do redis.call('HSET', ARGV[1] .. 'lease:' .. i, 'session', 'gone', 'token', i) end" 0 "$P" "$i" "$N" >/dev/null
done
walk() { # page size -> "calls mean_ms max_ms"
  redis-cli -u "$U" CONFIG SET latency-monitor-threshold 1 >/dev/null
  redis-cli -u "$U" LATENCY RESET >/dev/null
  redis-cli -u "$U" CONFIG RESETSTAT >/dev/null
  python3 - "$U" "$lua" "$P" "$1" <<'PY'
import subprocess, sys
u, lua, p, page = sys.argv[1:]
cur, calls = "0", 0
while True:
    out = subprocess.run(["redis-cli", "-u", u, "--eval", lua, ",", p, cur, page], capture_output=True, text=True, check=True).stdout.split("\n")
    calls += 1
    cur = out[2].strip()
    if cur == "0":
        break
stats = subprocess.run(["redis-cli", "-u", u, "INFO", "commandstats"], capture_output=True, text=True).stdout
line = next(l for l in stats.splitlines() if l.startswith("cmdstat_eval:"))
per = float(line.split("usec_per_call=")[1].split(",")[0]) / 1000
lat = subprocess.run(["redis-cli", "-u", u, "LATENCY", "LATEST"], capture_output=True, text=True).stdout.split()
worst = max((int(lat[i + 3]) for i in range(0, len(lat), 4) if lat[i] == "command"), default=0)
print(f"{calls} calls, {per:.1f} ms per call, longest command {worst} ms")
PY
}
echo "keys in the database: $(redis-cli -u "$U" DBSIZE) (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
echo "in pages of 1000 (inspect today): $(walk 1000)"
echo "one script over all keys (inspect before O13): $(walk $((N * 4)))"
redis-cli -u "$U" EVAL "local c = '0' repeat local r = redis.call('SCAN', c, 'MATCH', ARGV[1] .. '*', 'COUNT', 10000) c = r[1] for _, k in ipairs(r[2]) do redis.call('UNLINK', k) end until c == '0'" 0 "$P" >/dev/null
