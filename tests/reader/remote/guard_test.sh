#!/usr/bin/env bash
# remote_servers.sh's guard: servers started for a process that is then killed together with its
# whole process group (timeout(1), a killed test run) are all stopped by the guard, and nothing
# of them is left running. Exit 0 pass, 1 fail, 77 skip (no Swift/nginx here, or not root).
set -u
script=$(cd "$(dirname "$0")" && pwd)/remote_servers.sh
d=$(mktemp -d)
chmod 755 "$d"
cleanup() { "$script" stop "$d/s" > /dev/null 2>&1; rm -rf "$d"; }
trap cleanup EXIT
# A session of its own stands for the test binary's process group: a watched process and the
# servers it started.
setsid bash -c "sleep 600 & echo \$! > '$d/w'; '$script' start '$d/s' \$(cat '$d/w') > '$d/log' 2>&1; echo \$? > '$d/rc'; wait" \
  > /dev/null 2>&1 &
for _ in $(seq 1 600); do [[ -f $d/rc ]] && break; sleep 0.1; done
rc=$(cat "$d/rc" 2> /dev/null || echo 1)
[[ $rc == 77 ]] && { echo "guard_test: skipped: $(tail -n 1 "$d/log")"; exit 77; }
[[ $rc == 0 ]] || { echo "guard_test: FAIL: the servers did not start: $(tail -n 3 "$d/log")"; exit 1; }
running=$(pgrep -fc -- "$d/s/")
((running >= 5)) || { echo "guard_test: FAIL: only $running server processes started"; exit 1; }
kill -TERM -- "-$(ps -o pgid= -p "$(cat "$d/w")" | tr -d ' ')"
for i in $(seq 1 300); do
  left=$(pgrep -fc -- "$d/s/")
  ((left == 0)) && { echo "guard_test: ok: $running server processes, none left $i x 0.1 s after the group was killed"; exit 0; }
  sleep 0.1
done
echo "guard_test: FAIL: $left server processes still running 30 s after their test's group was killed:"
pgrep -fa -- "$d/s/" | cut -c1-120
exit 1
