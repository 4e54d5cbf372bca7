#!/usr/bin/python3
"""A small HTTP server for RemoteDatasetTest: serves the files under ROOT with HEAD and GET
(single byte ranges, 206 + Content-Range) and a *weak* ETag, W/"<mtime_ns>-<size>", as servers
that compress or transform bodies send; it ignores If-Match, as such servers may. kiln cannot use
If-Match with a weak ETag (RFC 9110 13.1.1: If-Match uses the strong comparison), so it compares
each answer's ETag with the one seen at open; a file replaced under ROOT must fail by name.

    weak_etag_server.py ROOT --port-file FILE [--pid-file FILE] [--no-head]

--no-head answers every HEAD with 405 Method Not Allowed (servers and presigned URLs that allow
GET only); GET still works.
"""

import argparse
import http.server
import os
import re


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    root = "."

    def log_message(self, *args):
        pass

    def _file(self):
        path = os.path.normpath(os.path.join(self.root, self.path.split("?")[0].lstrip("/")))
        if not path.startswith(os.path.abspath(self.root)) or not os.path.isfile(path):
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None, None
        st = os.stat(path)
        return path, st

    def _headers(self, code, st, length, extra=()):
        self.send_response(code)
        self.send_header("ETag", f'W/"{st.st_mtime_ns:x}-{st.st_size:x}"')
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()

    no_head = False

    def do_HEAD(self):
        if self.no_head:
            self.send_response(405)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        path, st = self._file()
        if path is not None:
            self._headers(200, st, st.st_size)

    def do_GET(self):
        path, st = self._file()
        if path is None:
            return
        m = re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("Range", ""))
        if not m:
            with open(path, "rb") as f:
                body = f.read()
            self._headers(200, st, len(body))
            self.wfile.write(body)
            return
        size = st.st_size
        if m.group(1) == "":
            start, end = max(0, size - int(m.group(2))), size - 1
        else:
            start = int(m.group(1))
            end = min(size - 1, int(m.group(2))) if m.group(2) else size - 1
        with open(path, "rb") as f:
            f.seek(start)
            body = f.read(end - start + 1)
        self._headers(206, st, len(body), [("Content-Range", f"bytes {start}-{end}/{size}")])
        self.wfile.write(body)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("--port-file", required=True)
    p.add_argument("--pid-file")
    p.add_argument("--no-head", action="store_true")
    a = p.parse_args()
    Handler.root = os.path.abspath(a.root)
    Handler.no_head = a.no_head
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if a.pid_file:
        with open(a.pid_file, "w") as f:
            f.write(f"{os.getpid()}\n")
    with open(a.port_file + ".tmp", "w") as f:
        f.write(f"{server.server_address[1]}\n")
    os.replace(a.port_file + ".tmp", a.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
