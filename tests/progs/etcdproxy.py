#!/usr/bin/env python3
"""etcdproxy: an HTTP proxy in front of one etcd member's client port that
can lose one release's answer, for tests/etcd_release.test.sh.

    etcdproxy.py LISTEN_PORT ETCD_PORT CONTROL_DIR

Each request the shim sends is passed to etcd on a connection of its own
(Connection: close) and etcd's answer passed back, until CONTROL_DIR/arm
exists: then the next /v3/kv/txn that deletes a key (a release) is passed
to etcd, so it runs, but its answer is thrown away and the shim's
connection closed (with CONTROL_DIR/hold: left open, unanswered, until
the shim gives up on it); the proxy writes CONTROL_DIR/dropped and from
then on closes every connection it accepts, unanswered, until
CONTROL_DIR/open exists. Writes CONTROL_DIR/ready once it listens."""
import os
import socket
import sys
import threading

listen_port, etcd_port, ctl = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
state = {"dropped": False}
lock = threading.Lock()


def has(name):
    return os.path.exists(os.path.join(ctl, name))


def refusing():
    with lock:
        return state["dropped"] and not has("open")


def read_request(f):
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        c = f.read(1)
        if not c:
            return None, None
        head += c
    lines = head.split(b"\r\n")
    length = 0
    kept = [lines[0]]
    for h in lines[1:]:
        if not h:
            continue
        name = h.split(b":", 1)[0].strip().lower()
        if name == b"content-length":
            length = int(h.split(b":", 1)[1])
        if name in (b"connection", b"keep-alive"):
            continue
        kept.append(h)
    body = f.read(length) if length else b""
    return lines[0], b"\r\n".join(kept) + b"\r\nConnection: close\r\n\r\n" + body


def serve(conn):
    f = conn.makefile("rb")
    try:
        while True:
            if refusing():
                return
            first, req = read_request(f)
            if req is None or refusing():
                return
            up = socket.create_connection(("127.0.0.1", etcd_port))
            up.sendall(req)
            answer = b""
            while True:
                got = up.recv(65536)
                if not got:
                    break
                answer += got
            up.close()
            with lock:
                drop = (not state["dropped"] and has("arm") and b"/v3/kv/txn" in first
                        and b"request_delete_range" in req)
                if drop:
                    state["dropped"] = True
                    open(os.path.join(ctl, "dropped"), "w").close()
            if drop:        # etcd ran it; the shim never hears so
                if has("hold"):
                    conn.settimeout(30)
                    while conn.recv(4096):
                        pass
                return
            conn.sendall(answer)
            return          # Connection: close, as etcd answered
    except OSError:
        return
    finally:
        f.close()
        conn.close()


srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", listen_port))
srv.listen(64)
open(os.path.join(ctl, "ready"), "w").close()
while True:
    c, _ = srv.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
