#!/usr/bin/env python3
"""A fault-injecting HTTP/1.1 proxy for OpenAI-compatible servers.

Sits in front of a real server (llama.cpp's llama-server in the fault matrix,
benchmarks/fault_matrix.py) and injects the fault kinds of `tokenscope serve
--faults` into the responses of POST requests, so that a client's outcome
counts can be checked against a server tokenscope did not write:

  http_5xx         answer 500 with an error body (the upstream is not asked)
  http_429         answer 429 with Retry-After: 1 (the upstream is not asked)
  reset            streaming: reset the connection (RST) after the second event;
                   not streaming: after the response head
  stall            hold the response for --stall-ms after the second event
                   (streaming) or after the head (not streaming)
  malformed        streaming: send a malformed SSE event after the second
                   event; not streaming: cut the JSON body in half
                   (Content-Length says the half)
  slow_first_byte  wait --slow-ms before forwarding the request

One uniform draw per POST, in arrival order, from a seeded generator picks at
most one fault (--rate each). Every injected fault is written as a JSON line
to --log: {"xrid": X-Request-Id, "fault": kind}. GET requests (model
discovery, /tokenize is a POST but not a generation: paths other than
*/completions pass untouched) are forwarded untouched. Keep-alive toward the
client is honoured; each request gets its own upstream connection.

Usage: fault_proxy.py --listen PORT --upstream HOST:PORT --log FILE [--seed N]
                      [--rate 0.05] [--kinds k1,k2,...] [--stall-ms 10000]
                      [--slow-ms 200] [--port-file FILE]
"""
import argparse
import asyncio
import json
import random
import socket
import struct
import sys

KINDS = ["http_5xx", "http_429", "reset", "stall", "malformed", "slow_first_byte"]


class Proxy:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.kinds = args.kinds.split(",") if args.kinds else KINDS
        for k in self.kinds:
            if k not in KINDS:
                raise SystemExit(f"--kinds: unknown fault kind '{k}' (expected one of {', '.join(KINDS)})")
        if args.rate * len(self.kinds) > 1:
            raise SystemExit("--rate times the number of kinds must be at most 1")
        self.log = open(args.log, "a", buffering=1)
        uh, up = args.upstream.rsplit(":", 1)
        self.upstream = (uh, int(up))

    def draw(self):
        u = self.rng.random()
        acc = 0.0
        for k in self.kinds:
            acc += self.args.rate
            if u < acc:
                return k
        return None

    async def handle(self, reader, writer):
        try:
            while True:
                head = await read_head(reader)
                if head is None:
                    break
                line, headers = parse_head(head)
                length = int(headers.get("content-length", "0"))
                body = await reader.readexactly(length) if length else b""
                method, path = line.split(" ")[0], line.split(" ")[1]
                fault = None
                if method == "POST" and path.rstrip("/").endswith("completions"):
                    fault = self.draw()
                    if fault:
                        self.log.write(json.dumps({"xrid": headers.get("x-request-id", ""), "fault": fault,
                                                   "path": path}) + "\n")
                close = headers.get("connection", "").lower() == "close"
                stream = False
                if method == "POST":
                    try:
                        stream = bool(json.loads(body or b"{}").get("stream", False))
                    except ValueError:
                        pass
                keep = await self.answer(writer, head, body, fault, stream, close)
                if not keep or close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            try:
                writer.close()
            except Exception:
                pass

    async def answer(self, writer, head, body, fault, stream, close):
        """Returns whether the client connection may carry another request."""
        conn = b"Connection: close\r\n" if close else b""
        if fault == "http_5xx":
            b = b'{"error":{"message":"injected fault: http_5xx","type":"server_error","code":500}}'
            writer.write(b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n" + conn +
                         b"Content-Length: " + str(len(b)).encode() + b"\r\n\r\n" + b)
            await writer.drain()
            return True
        if fault == "http_429":
            b = b'{"error":{"message":"injected fault: http_429","type":"rate_limit","code":429}}'
            writer.write(b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nContent-Type: application/json\r\n" +
                         conn + b"Content-Length: " + str(len(b)).encode() + b"\r\n\r\n" + b)
            await writer.drain()
            return True
        if fault == "slow_first_byte":
            await asyncio.sleep(self.args.slow_ms / 1000)
        ur, uw = await asyncio.open_connection(*self.upstream)
        try:
            # One request per upstream connection.
            lines = head.decode("latin-1").split("\r\n")
            out = [lines[0]] + [l for l in lines[1:] if l and not l.lower().startswith("connection:")]
            uw.write(("\r\n".join(out) + "\r\nConnection: close\r\n\r\n").encode("latin-1") + body)
            await uw.drain()
            rhead = await read_head(ur)
            if rhead is None:
                raise ConnectionError("upstream closed before answering")
            status_line, rheaders = parse_head(rhead)
            chunked = "chunked" in rheaders.get("transfer-encoding", "").lower()
            keep_headers = [l for l in rhead.decode("latin-1").split("\r\n")[1:]
                            if l and l.split(":")[0].strip().lower() not in
                            ("content-length", "transfer-encoding", "connection", "keep-alive")]
            if not stream or not chunked and "content-length" in rheaders:
                data = await read_body(ur, rheaders, chunked)
                if fault == "malformed":
                    data = data[: len(data) // 2]
                hd = status_line + "\r\n" + "".join(h + "\r\n" for h in keep_headers)
                hd += f"Content-Length: {len(data)}\r\n" + ("Connection: close\r\n" if close else "") + "\r\n"
                if fault in ("reset", "stall"):
                    writer.write(hd.encode("latin-1"))
                    await writer.drain()
                    if fault == "reset":
                        return reset(writer)
                    await asyncio.sleep(self.args.stall_ms / 1000)
                    writer.write(data)
                else:
                    writer.write(hd.encode("latin-1") + data)
                await writer.drain()
                return True
            # A stream: relayed piece by piece, re-chunked, with the fault after the second event.
            hd = status_line + "\r\n" + "".join(h + "\r\n" for h in keep_headers)
            hd += "Transfer-Encoding: chunked\r\n" + ("Connection: close\r\n" if close else "") + "\r\n"
            writer.write(hd.encode("latin-1"))
            events = 0
            injected = fault not in ("reset", "stall", "malformed")
            pending = b""
            async for piece in body_pieces(ur, rheaders, chunked):
                pending += piece
                # Forward whole events only, so that a fault lands between events.
                while b"\n\n" in pending:
                    ev, pending = pending.split(b"\n\n", 1)
                    send_chunk(writer, ev + b"\n\n")
                    events += 1
                    if not injected and events == 2:
                        injected = True
                        if fault == "reset":
                            await writer.drain()
                            return reset(writer)
                        if fault == "stall":
                            await writer.drain()
                            await asyncio.sleep(self.args.stall_ms / 1000)
                        if fault == "malformed":
                            send_chunk(writer, b'data: {"id": "malformed-event", "choices": [\n\n')
                await writer.drain()
            if pending:
                send_chunk(writer, pending)
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return True
        finally:
            uw.close()


def reset(writer):
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
    return False


def send_chunk(writer, data):
    writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")


async def read_head(reader):
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        if e.partial:
            raise
        return None
    return head[:-4]


def parse_head(head):
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for l in lines[1:]:
        if ":" in l:
            k, v = l.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return lines[0], headers


async def body_pieces(reader, headers, chunked):
    if chunked:
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";")[0].strip(), 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                return
            data = await reader.readexactly(size)
            await reader.readexactly(2)
            yield data
    elif "content-length" in headers:
        left = int(headers["content-length"])
        while left > 0:
            data = await reader.read(min(left, 65536))
            if not data:
                raise ConnectionError("upstream closed inside the body")
            left -= len(data)
            yield data
    else:
        while True:
            data = await reader.read(65536)
            if not data:
                return
            yield data


async def read_body(reader, headers, chunked):
    out = b""
    async for piece in body_pieces(reader, headers, chunked):
        out += piece
    return out


async def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--listen", type=int, default=0)
    ap.add_argument("--upstream", required=True, help="HOST:PORT of the real server")
    ap.add_argument("--log", required=True, help="JSON lines, one per injected fault")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rate", type=float, default=0.05, help="probability of each kind per POST")
    ap.add_argument("--kinds", default="", help="comma-separated subset of " + ",".join(KINDS))
    ap.add_argument("--stall-ms", type=float, default=10000)
    ap.add_argument("--slow-ms", type=float, default=200)
    ap.add_argument("--port-file", help="write the bound port here once listening")
    args = ap.parse_args()
    proxy = Proxy(args)
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", args.listen, backlog=1024)
    port = server.sockets[0].getsockname()[1]
    if args.port_file:
        with open(args.port_file + ".tmp", "w") as f:
            f.write(str(port))
        import os
        os.replace(args.port_file + ".tmp", args.port_file)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
