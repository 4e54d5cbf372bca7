#!/usr/bin/env bash
# Real servers for the remote-reading tests, all on 127.0.0.1 with free ports, every file under
# one directory, every daemon started and stopped by its pid file:
#   - OpenStack Swift (account, container, object servers + proxy with s3api and tempauth) and
#     memcached: S3 access key test:tester, secret testing, region us-east-1, path-style;
#   - nginx serving DIR/www over HTTP and HTTPS (a self-signed certificate for 127.0.0.1 made
#     here, DIR/tls/cert.pem is its own CA file).
#
#   remote_servers.sh start DIR [WATCH_PID]  # writes DIR/env (S3_ENDPOINT, HTTP_URL, HTTPS_URL,
#                                            # CA_FILE); waits until each answers; exit 1 with
#                                            # the logs' tails when one does not. With WATCH_PID,
#                                            # a guard stops everything once that process is
#                                            # gone (a test binary that crashed).
#   remote_servers.sh stop DIR               # stops what DIR's pid files name; waits for each
#   remote_servers.sh stop-http DIR          # stops nginx alone (a server gone mid-read)
#   remote_servers.sh start-http DIR         # starts it again on the same ports
#   remote_servers.sh start-proxy DIR NAME TARGET_URL [FAULT_PROXY_OPTIONS...]
#                                            # fault_proxy.py in front of TARGET_URL's host and
#                                            # port; prints its URL (TARGET_URL's scheme and path
#                                            # on the proxy's port); DIR/run/proxy-NAME.stats
#                                            # counts the faults it injected
#   remote_servers.sh stop-proxy DIR NAME
#
# Exit 77 (skip) when a package is missing: scripts/setup.sh installs them.
set -euo pipefail
PATH=$PATH:/usr/sbin:/sbin

die() {
  echo "remote_servers: error: $*" >&2
  tail -n 20 "$dir"/log/*.log >&2 2> /dev/null || true
  exit 1
}

# stop_pidfile FILE NAME (tests/lib/daemon.sh)
# shellcheck source=../../lib/daemon.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../lib/daemon.sh"

stop_all() {
  local d=$1
  stop_pidfile "$d/run/guard.pid" remote_servers
  for s in proxy object container account; do stop_pidfile "$d/run/$s.pid" "swift-$s-server"; done
  stop_pidfile "$d/run/memcached.pid" memcached
  stop_pidfile "$d/run/nginx.pid" nginx
  local f
  for f in "$d"/run/proxy-*.pid; do stop_pidfile "$f" fault_proxy.py; done
}

start_proxy() {  # NAME TARGET_URL [OPTIONS...]
  local name=$1 target=$2 hostport rest
  shift 2
  [[ $target =~ ^(https?)://([^/]+)(.*)$ ]] || die "start-proxy: $target is not an http(s) URL"
  hostport=${BASH_REMATCH[2]}
  rest=${BASH_REMATCH[3]}
  rm -f "$dir/run/proxy-$name.port" "$dir/run/proxy-$name.stats"
  /usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/fault_proxy.py" --target "$hostport" \
    --port-file "$dir/run/proxy-$name.port" --stats "$dir/run/proxy-$name.stats" \
    --pid-file "$dir/run/proxy-$name.pid" "$@" > "$dir/log/proxy-$name.log" 2>&1 &
  for _ in $(seq 1 100); do
    [[ -s $dir/run/proxy-$name.port ]] && break
    sleep 0.1
  done
  [[ -s $dir/run/proxy-$name.port ]] || die "fault_proxy $name did not start"
  echo "${BASH_REMATCH[1]}://127.0.0.1:$(cat "$dir/run/proxy-$name.port")$rest"
}

free_ports() {  # prints $1 distinct free TCP ports on 127.0.0.1
  python3 - "$1" << 'PY'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

wait_port() {  # waits up to 20 s for 127.0.0.1:$1 to accept; $2 names it
  for _ in $(seq 1 200); do
    (exec 3<> "/dev/tcp/127.0.0.1/$1") 2> /dev/null && return 0
    sleep 0.1
  done
  die "$2 did not listen on 127.0.0.1:$1 within 20 s"
}

start_swift() {
  local a=$1 c=$2 o=$3 p=$4 m=$5 s
  mkdir -p "$dir/swift/rings" "$dir/swift/devices/d1"
  for s in account:$a container:$c object:$o; do
    local kind=${s%%:*} port=${s##*:}
    (cd "$dir/swift/rings" && swift-ring-builder "$kind.builder" create 6 1 1 > /dev/null &&
      swift-ring-builder "$kind.builder" add "r1z1-127.0.0.1:$port/d1" 1 > /dev/null &&
      swift-ring-builder "$kind.builder" rebalance > /dev/null) || die "swift-ring-builder $kind failed"
    cat > "$dir/swift/$kind-server.conf" << CONF
[DEFAULT]
bind_ip = 127.0.0.1
bind_port = $port
devices = $dir/swift/devices
mount_check = false
swift_dir = $dir/swift/rings
workers = 1
user = swift
log_name = $kind
[pipeline:main]
pipeline = $kind-server
[app:$kind-server]
use = egg:swift#$kind
CONF
  done
  cat > "$dir/swift/proxy-server.conf" << CONF
[DEFAULT]
bind_ip = 127.0.0.1
bind_port = $p
swift_dir = $dir/swift/rings
workers = 1
user = swift
[pipeline:main]
pipeline = catch_errors gatekeeper proxy-logging cache listing_formats s3api tempauth copy slo dlo proxy-logging proxy-server
[app:proxy-server]
use = egg:swift#proxy
account_autocreate = true
[filter:tempauth]
use = egg:swift#tempauth
user_test_tester = testing .admin
[filter:s3api]
use = egg:swift#s3api
location = us-east-1
[filter:cache]
use = egg:swift#memcache
memcache_servers = 127.0.0.1:$m
[filter:catch_errors]
use = egg:swift#catch_errors
[filter:gatekeeper]
use = egg:swift#gatekeeper
[filter:proxy-logging]
use = egg:swift#proxy_logging
[filter:listing_formats]
use = egg:swift#listing_formats
[filter:copy]
use = egg:swift#copy
[filter:slo]
use = egg:swift#slo
[filter:dlo]
use = egg:swift#dlo
CONF
  chown -R swift: "$dir/swift"
  memcached -u swift -l 127.0.0.1 -p "$m" -U 0 > "$dir/log/memcached.log" 2>&1 &
  echo $! > "$dir/run/memcached.pid"
  for s in account container object proxy; do
    "swift-$s-server" "$dir/swift/$s-server.conf" > "$dir/log/$s.log" 2>&1 &
    echo $! > "$dir/run/$s.pid"
  done
  wait_port "$m" memcached
  for s in "$a account" "$c container" "$o object" "$p proxy"; do wait_port ${s% *} "swift-${s#* }-server"; done
}

start_nginx() {
  local h=$1 t=$2
  mkdir -p "$dir/www" "$dir/tls" "$dir/nginx"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=127.0.0.1 \
    -addext subjectAltName=IP:127.0.0.1 -keyout "$dir/tls/key.pem" -out "$dir/tls/cert.pem" \
    > "$dir/log/openssl.log" 2>&1 || die "openssl could not make the test certificate"
  cat > "$dir/nginx/nginx.conf" << CONF
daemon off;
worker_processes 1;
pid $dir/run/nginx.pid.unused;
error_log $dir/log/nginx.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $dir/nginx; proxy_temp_path $dir/nginx; fastcgi_temp_path $dir/nginx;
  uwsgi_temp_path $dir/nginx; scgi_temp_path $dir/nginx;
  keepalive_requests 100000;
  server {
    listen 127.0.0.1:$h;
    listen 127.0.0.1:$t ssl;
    ssl_certificate $dir/tls/cert.pem;
    ssl_certificate_key $dir/tls/key.pem;
    root $dir/www;
    # A moved dataset: /moved/NAME answers 302 to /NAME (redirects followed for http(s)).
    location /moved/ { rewrite ^/moved/(.*)\$ /\$1 redirect; }
  }
}
CONF
  launch_nginx "$h" "$t"
}

launch_nginx() {  # starts nginx on the configuration start_nginx wrote
  # A port that already answers is another server's (an nginx not stopped with stop-http): the
  # new nginx would fail to bind and exit while wait_port saw the old one, leaving the pid file
  # naming a dead process and the old nginx running after `stop`.
  local port
  for port in "$1" "$2"; do
    if (exec 3<> "/dev/tcp/127.0.0.1/$port") 2> /dev/null; then
      die "127.0.0.1:$port is already in use (nginx still running? stop-http first)"
    fi
  done
  nginx -c "$dir/nginx/nginx.conf" -e "$dir/log/nginx.log" >> "$dir/log/nginx-stdout.log" 2>&1 &
  local pid=$!
  echo $pid > "$dir/run/nginx.pid"
  wait_port "$1" nginx
  wait_port "$2" "nginx (TLS)"
  kill -0 "$pid" 2> /dev/null || die "nginx (pid $pid) exited after starting"
}

cmd=${1:-}
dir=${2:-}
[[ -n $dir ]] || { echo "usage: $0 start|stop|stop-http|start-http|start-proxy|stop-proxy DIR [...]" >&2; exit 2; }
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
case $cmd in
  stop) stop_all "$dir" ;;
  # A server that goes away and comes back mid-read (the fault tests): nginx alone, same ports.
  stop-http) stop_pidfile "$dir/run/nginx.pid" nginx ;;
  start-http)
    ph=$(sed -n 's|^HTTP_URL=http://127.0.0.1:||p' "$dir/env")
    pt=$(sed -n 's|^HTTPS_URL=https://127.0.0.1:||p' "$dir/env")
    launch_nginx "$ph" "$pt"
    ;;
  start-proxy) start_proxy "${@:3}" ;;
  stop-proxy) stop_pidfile "$dir/run/proxy-${3:?stop-proxy DIR NAME}.pid" fault_proxy.py ;;
  start)
    for tool in swift-proxy-server swift-object-server swift-container-server \
      swift-account-server swift-ring-builder memcached nginx openssl python3; do
      command -v "$tool" > /dev/null || {
        echo "remote_servers: $tool not found: install the Debian packages swift-proxy swift-object swift-container swift-account memcached nginx (scripts/setup.sh)" >&2
        exit 77
      }
    done
    [[ $(id -u) -eq 0 ]] || { echo "remote_servers: Swift's daemons start as root (user = swift)" >&2; exit 77; }
    stop_all "$dir"  # servers a crashed run left here
    rm -rf "$dir/swift" "$dir/log" "$dir/run" "$dir/env"
    mkdir -p "$dir/log" "$dir/run"
    chmod 755 "$dir"
    read -r pa pc po pp pm ph pt <<< "$(free_ports 7)"
    start_swift "$pa" "$pc" "$po" "$pp" "$pm"
    start_nginx "$ph" "$pt"
    if [[ -n ${3:-} ]]; then
      watch=$3
      # In a session of its own (setsid, which keeps the pid here): a signal to the test's whole
      # process group (timeout(1), a terminal's Ctrl-C) must not take the guard down with it,
      # or the servers outlive the test. Its pid file goes before it runs `stop` (bash execs
      # that last command in the guard's own process, which `stop` would otherwise kill first).
      (
        exec -a remote_servers_guard setsid bash -c "while kill -0 $watch 2> /dev/null; do sleep 0.5; done; rm -f '$dir/run/guard.pid'; '$0' stop '$dir'"
      ) > /dev/null 2>&1 &
      echo $! > "$dir/run/guard.pid"
    fi
    cat > "$dir/env" << ENV
S3_ENDPOINT=http://127.0.0.1:$pp
HTTP_URL=http://127.0.0.1:$ph
HTTPS_URL=https://127.0.0.1:$pt
CA_FILE=$dir/tls/cert.pem
WWW_DIR=$dir/www
ENV
    ;;
  *) echo "usage: $0 start|stop|stop-http|start-http|start-proxy|stop-proxy DIR [...]" >&2; exit 2 ;;
esac
