#!/usr/bin/env python3
"""A throttled storage path for tests/scale/stats_ranks_test.sh: serves the files under ROOT over
HTTP/1.1 on 127.0.0.1 with what kiln's range client needs (reader/remote/remote.md): HEAD with
Content-Length and ETag, GET with Range (bytes=A-B, bytes=A-, bytes=-N) answered 206, If-Match
checked (412). Every response body is sent at no more than RATE bytes per second, all requests
together (one lock), plus DELAY_MS per request: a slow disk whatever the client's concurrency.

    throttled_http.py ROOT --port-file FILE [--rate BYTES_PER_S] [--delay-ms MS]

Writes the port it listens on to FILE once it accepts connections; runs until killed (the test
stops it by its pid).
"""
import argparse
import hashlib
import http.server
import os
import re
import threading
import time

LOCK = threading.Lock()


def make_handler(root, rate, delay_s):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # quiet: the test's output stays readable
            pass

        def _file(self):
            path = os.path.normpath(os.path.join(root, self.path.split("?")[0].lstrip("/")))
            if not path.startswith(os.path.abspath(root)) or not os.path.isfile(path):
                return None, None, None
            st = os.stat(path)
            etag = '"%s"' % hashlib.md5(f"{path}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()
            return path, st.st_size, etag

        def _error(self, code):
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_HEAD(self):
            path, size, etag = self._file()
            if path is None:
                return self._error(404)
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.send_header("ETag", etag)
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()

        def do_GET(self):
            path, size, etag = self._file()
            if path is None:
                return self._error(404)
            if_match = self.headers.get("If-Match")
            if if_match and if_match != etag and if_match != "*":
                return self._error(412)
            start, end = 0, size - 1
            ranged = self.headers.get("Range")
            if ranged:
                m = re.fullmatch(r"bytes=(\d*)-(\d*)", ranged.strip())
                if not m or (m.group(1) == "" and m.group(2) == ""):
                    return self._error(416)
                if m.group(1) == "":
                    start, end = max(0, size - int(m.group(2))), size - 1
                else:
                    start = int(m.group(1))
                    end = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
                if start >= size or start > end:
                    return self._error(416)
            with open(path, "rb") as f:
                f.seek(start)
                body = f.read(end - start + 1)
            with LOCK:  # the storage's one rate, shared by every request
                time.sleep(delay_s + (len(body) / rate if rate > 0 else 0))
            self.send_response(206 if ranged else 200)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("ETag", etag)
            if ranged:
                self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
            self.end_headers()
            self.wfile.write(body)

    return Handler


def main():
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("--port-file", required=True)
    p.add_argument("--rate", type=float, default=0, help="bytes per second, 0 unlimited")
    p.add_argument("--delay-ms", type=float, default=0)
    args = p.parse_args()
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), make_handler(os.path.abspath(args.root), args.rate, args.delay_ms / 1e3))
    server.daemon_threads = True
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(args.port_file + ".tmp", args.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
