#!/usr/bin/python3
"""A TCP proxy on 127.0.0.1 that puts network faults between a client and a real server.

The remote tests and bench/remote.sh put it in front of nginx or Swift when the kernel has no
netem qdisc (tc netem in a network namespace is the first choice; this machine's kernel lacks
sch_netem). It forwards bytes unchanged in both directions (so SigV4 signatures, which cover the
Host header the client sent to the proxy, still check) and injects, from a seeded random stream:

  --delay-ms D      every chunk is delivered D ms after it arrived, in each direction (the round
                    trip grows by 2*D; chunks stay in order and pipelined, as on a long link)
  --stall P         each server->client chunk, with probability P, is held 200 ms more: a lost
                    segment that TCP resends after its minimum retransmission timeout (Linux:
                    200 ms), which is what packet loss costs a TCP stream
  --reset P         each server->client chunk, with probability P, is replaced by a TCP reset of
                    both connections (SO_LINGER 0): the client sees "connection reset" or a body
                    cut short
  --slowdown P      a new connection's first request is answered, with probability P, by
                    "503 SlowDown" in S3's XML form and the connection closed
  --slowdown-every K  every K-th new connection is answered so (deterministic, for tests that
                    must see it happen)
  --hang P          a new connection, with probability P, is accepted and never answered (the
                    client's request timeout must end it)
  --slow P          each request (a client->server chunk that starts with an HTTP method), with
                    probability P, reaches the server --slow-ms later (default 3000): a server
                    that answers a few requests very late, the slow tail hedged requests cut
  --slow-every K    every K-th request is held so (deterministic, for tests that must see it)

Counts of every fault injected are written as JSON to --stats after each one (a test asserts
that faults did happen), the listening port to --port-file, and the pid to --pid-file. Stops on
SIGTERM or when --watch-pid is gone.
"""

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import struct
import time

CHUNK = 64 * 1024
RTO_SECONDS = 0.2
_SLOWDOWN_BODY = (b"<?xml version='1.0' encoding='UTF-8'?>\n<Error><Code>SlowDown</Code>"
                  b"<Message>Please reduce your request rate.</Message></Error>\n")
SLOWDOWN = (b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n" % len(_SLOWDOWN_BODY) + _SLOWDOWN_BODY)


class Proxy:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)  # chunk faults
        self.conn_rng = random.Random(args.seed + 1)  # connection faults: their own stream
        self.slow_rng = random.Random(args.seed + 2)  # slow requests: their own stream
        self.counts = {"connections": 0, "chunks": 0, "delayed": 0, "stalls": 0, "resets": 0,
                       "slowdowns": 0, "hangs": 0, "requests": 0, "slowed": 0}

    def count(self, what):
        self.counts[what] += 1
        if what in ("stalls", "resets", "slowdowns", "hangs", "slowed"):
            self.write_stats()

    def write_stats(self):
        if self.args.stats:
            tmp = self.args.stats + ".tmp"
            with open(tmp, "w") as f:
                json.dump(self.counts, f)
            os.replace(tmp, self.args.stats)

    @staticmethod
    def reset(writer):
        sock = writer.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
        writer.transport.abort()

    async def pump(self, reader, writer, peer_writer, downstream):
        """Copies reader -> writer through a delay queue; faults only on the server's answers."""
        queue = asyncio.Queue()
        delay = self.args.delay_ms / 1000.0

        async def deliver():
            while True:
                due, chunk = await queue.get()
                if chunk is None:
                    break
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                if chunk == b"RESET":
                    self.reset(writer)
                    self.reset(peer_writer)
                    return
                writer.write(chunk)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()

        sender = asyncio.ensure_future(deliver())
        try:
            while True:
                chunk = await reader.read(CHUNK)
                if not chunk:
                    break
                due = time.monotonic() + delay
                if delay > 0:
                    self.counts["delayed"] += 1
                if not downstream and chunk[:4] in (b"GET ", b"HEAD"):
                    self.counts["requests"] += 1
                    every = self.args.slow_every
                    if ((self.args.slow > 0 and self.slow_rng.random() < self.args.slow)
                            or (every > 0 and self.counts["requests"] % every == 0)):
                        self.count("slowed")
                        due += self.args.slow_ms / 1000.0
                if downstream:
                    self.counts["chunks"] += 1
                    if self.rng.random() < self.args.reset:
                        self.count("resets")
                        queue.put_nowait((due, b"RESET"))
                        break
                    if self.rng.random() < self.args.stall:
                        self.count("stalls")
                        due += RTO_SECONDS
                queue.put_nowait((due, chunk))
        except (ConnectionError, OSError):
            pass
        queue.put_nowait((0, None))
        try:
            await sender
        except (ConnectionError, OSError):
            pass

    async def handle(self, client_reader, client_writer):
        self.count("connections")
        number = self.counts["connections"]
        if self.args.hang > 0 and self.conn_rng.random() < self.args.hang:
            self.count("hangs")
            try:
                while await client_reader.read(CHUNK):
                    pass
            except (ConnectionError, OSError):
                pass
            client_writer.close()
            return
        try:
            every = self.args.slowdown_every
            if ((self.args.slowdown > 0 and self.conn_rng.random() < self.args.slowdown)
                    or (every > 0 and number % every == 0)):
                head = await client_reader.readuntil(b"\r\n\r\n")
                if head:
                    self.count("slowdowns")
                    client_writer.write(SLOWDOWN)
                    await client_writer.drain()
                    client_writer.close()
                    return
            server_reader, server_writer = await asyncio.open_connection(
                self.args.target_host, self.args.target_port)
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            client_writer.close()
            return
        await asyncio.gather(
            self.pump(client_reader, server_writer, client_writer, downstream=False),
            self.pump(server_reader, client_writer, server_writer, downstream=True))
        for w in (client_writer, server_writer):
            w.close()


async def main(args):
    proxy = Proxy(args)
    proxy.write_stats()
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", args.port)
    port = server.sockets[0].getsockname()[1]
    if args.port_file:
        with open(args.port_file + ".tmp", "w") as f:
            f.write(f"{port}\n")
        os.replace(args.port_file + ".tmp", args.port_file)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)

    async def watch():
        while args.watch_pid and not stop.is_set():
            try:
                os.kill(args.watch_pid, 0)
            except ProcessLookupError:
                stop.set()
            await asyncio.sleep(1)

    watcher = asyncio.ensure_future(watch())
    async with server:
        await stop.wait()
    watcher.cancel()
    proxy.write_stats()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", required=True, help="HOST:PORT of the real server")
    p.add_argument("--port", type=int, default=0, help="port to listen on (0: any free one)")
    p.add_argument("--delay-ms", type=float, default=0.0)
    p.add_argument("--stall", type=float, default=0.0)
    p.add_argument("--reset", type=float, default=0.0)
    p.add_argument("--slowdown", type=float, default=0.0)
    p.add_argument("--slowdown-every", type=int, default=0)
    p.add_argument("--hang", type=float, default=0.0)
    p.add_argument("--slow", type=float, default=0.0)
    p.add_argument("--slow-every", type=int, default=0)
    p.add_argument("--slow-ms", type=float, default=3000.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--stats")
    p.add_argument("--port-file")
    p.add_argument("--pid-file")
    p.add_argument("--watch-pid", type=int, default=0)
    a = p.parse_args()
    a.target_host, a.target_port = a.target.rsplit(":", 1)[0], int(a.target.rsplit(":", 1)[1])
    if a.pid_file:
        with open(a.pid_file, "w") as f:
            f.write(f"{os.getpid()}\n")
    asyncio.run(main(a))
