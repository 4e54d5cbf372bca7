# Shared by the test harnesses that start real daemons (tests/scale/slurm_cluster.sh,
# tests/reader/remote/remote_servers.sh); source it, do not run it.
#
#   stop_pidfile FILE NAME   stops the process whose pid FILE holds, only when its command line
#                            names NAME (a pid reused by another program is left alone); removes
#                            FILE; SIGTERM, then SIGKILL after 10 s, saying so on stderr.

stop_pidfile() {
  local file=$1 name=$2 pid
  [[ -f $file ]] || return 0
  pid=$(cat "$file" 2> /dev/null || true)
  rm -f "$file"
  [[ $pid =~ ^[0-9]+$ ]] || return 0
  grep -qa -- "$name" "/proc/$pid/cmdline" 2> /dev/null || return 0
  kill -TERM "$pid" 2> /dev/null || return 0
  for _ in $(seq 1 100); do
    kill -0 "$pid" 2> /dev/null || return 0
    sleep 0.1
  done
  echo "$name (pid $pid) did not stop in 10 s; SIGKILL" >&2
  kill -KILL "$pid" 2> /dev/null || true
}
