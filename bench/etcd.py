#!/usr/bin/python3
"""bench/etcd.py: the etcd store's figures, in one run on one cluster.

Starts a 3-member etcd cluster (Debian's etcd, free loopback ports, temp
data dirs, heartbeat 50 ms / election 500 ms) and measures, in the same
minute, every figure as a ratio to what etcd itself costs:

  write      one Txn that puts a key (etcd's unit of work: a Raft entry and
             a WAL fsync on a majority), on a kept-alive HTTP connection
  notify     a put by one client until another's watch delivers it
  pair       an uncontended lock+unlock of a mapped mutex (bench/cycle pairs,
             batch_ms = 0): in etcd writes
  handoff    K processes on one mutex (cycle pairs each, batch_ms = 0): the
             time per acquisition, in watch notifications
  peer       etcd's own lock service (/v3/lock/lock + /v3/lock/unlock, each
             client with its own kept lease) driven the same way, at every K

Prints a Markdown section (also written to bench/etcd-results.md).
Run by bench/run.sh (`make bench`) with REDIS_TMP_PORT set (cycle times a
PING of that server, and the peers need none). BENCH_QUICK=1: shorter runs.
"""
import base64, http.client, json, os, shutil, socket, statistics, subprocess, sys, tempfile
import threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CYCLE = os.path.join(ROOT, "build", "bench", "cycle")
SHIM = os.path.join(ROOT, "build", "libdmutex.so")
QUICK = os.environ.get("BENCH_QUICK", "") not in ("", "0")
SECONDS = 2 if QUICK else 5
KS = [1, 2, 4, 8]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def b64(s):
    return base64.b64encode(s.encode()).decode()


class Cluster:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="dmutex-bench-etcd.")
        self.cports = [free_port() for _ in range(3)]
        pports = [free_port() for _ in range(3)]
        cluster = ",".join("m%d=http://127.0.0.1:%d" % (i, p) for i, p in enumerate(pports))
        self.procs = []
        for i in range(3):
            c = "http://127.0.0.1:%d" % self.cports[i]
            p = "http://127.0.0.1:%d" % pports[i]
            self.procs.append(subprocess.Popen(
                ["etcd", "--name", "m%d" % i, "--data-dir", os.path.join(self.dir, "m%d" % i),
                 "--listen-client-urls", c, "--advertise-client-urls", c,
                 "--listen-peer-urls", p, "--initial-advertise-peer-urls", p,
                 "--initial-cluster", cluster, "--initial-cluster-state", "new",
                 "--heartbeat-interval", "50", "--election-timeout", "500",
                 "--logger", "zap", "--log-outputs", os.path.join(self.dir, "m%d.log" % i)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        end = time.time() + 30
        while time.time() < end:
            try:
                st = self.post(self.cports[0], "/v3/maintenance/status", {})
                if st.get("leader", "0") != "0":
                    self.leader_port = self.leader()
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise SystemExit("bench/etcd.py: the etcd members elected no leader")

    def leader(self):
        for p in self.cports:
            st = self.post(p, "/v3/maintenance/status", {})
            if st["header"]["member_id"] == st["leader"]:
                return p
        return self.cports[0]

    @staticmethod
    def post(port, path, body, conn=None):
        c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("POST", path, json.dumps(body))
        r = json.loads(c.getresponse().read())
        if not conn:
            c.close()
        return r

    def stop(self):
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def endpoints(self):
        return ",".join("127.0.0.1:%d" % p for p in self.cports)


def write_ms(cl, n):
    c = http.client.HTTPConnection("127.0.0.1", cl.leader_port, timeout=30)
    t = []
    for i in range(n):
        t0 = time.perf_counter()
        Cluster.post(0, "/v3/kv/txn", {"compare": [], "success": [
            {"request_put": {"key": b64("bench#w"), "value": b64(str(i))}}]}, c)
        t.append(time.perf_counter() - t0)
    c.close()
    return statistics.median(t) * 1000


def notify_ms(cl, n):
    """A put on one connection until a watch on another delivers it."""
    key = b64("bench#n")
    w = http.client.HTTPConnection("127.0.0.1", cl.leader_port, timeout=30)
    w.request("POST", "/v3/watch", json.dumps({"create_request": {"key": key}}))
    resp = w.getresponse()
    resp.readline()                      # created
    got = []
    seen = threading.Event()

    def reader():
        while len(got) < n:
            line = resp.readline()
            if not line:
                return
            if b'"events"' in line:
                got.append(time.perf_counter())
                seen.set()

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    c = http.client.HTTPConnection("127.0.0.1", cl.leader_port, timeout=30)
    lat = []
    for i in range(n):
        seen.clear()
        t0 = time.perf_counter()
        Cluster.post(0, "/v3/kv/put", {"key": key, "value": b64(str(i))}, c)
        if not seen.wait(5):
            break
        lat.append(got[-1] - t0)
    c.close()
    w.close()
    return statistics.median(lat) * 1000


def config(dirname, name):
    path = os.path.join(dirname, name + ".cfg")
    with open(path, "w") as f:
        f.write('lease_ms = 10000;\nbatch_ms = 0;\n'
                'mutexes = ( { symbol = "bench_lock"; name = "%s"; } );\n' % name)
    return path


def dmutex_pairs(cl, k, name, redis_port):
    """K cycle processes on one mutex for SECONDS: acquisitions per second."""
    cfg = config(cl.dir, name)
    env = dict(os.environ, LD_PRELOAD=SHIM, DMUTEX_CONFIG=cfg, DMUTEX_ETCD=cl.endpoints(),
               DMUTEX_LOG="error")
    ps = [subprocess.Popen([CYCLE, "pairs", "127.0.0.1", str(redis_port), str(SECONDS), "0"],
                           env=env, stdout=subprocess.PIPE, text=True) for _ in range(k)]
    n = ns = 0
    for p in ps:
        out = json.loads(p.communicate()[0])
        n += out["n"]
        ns = max(ns, out["ns"])
    return n / (ns / 1e9)


PEER = r'''
import base64, http.client, json, sys, time
port, name, secs = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
def post(path, body):
    c.request("POST", path, json.dumps(body)); return json.loads(c.getresponse().read())
lease = post("/v3/lease/grant", {"TTL": 10})["ID"]
nm = base64.b64encode(name.encode()).decode()
end = time.time() + secs; n = 0; last = time.time()
while time.time() < end:
    k = post("/v3/lock/lock", {"name": nm, "lease": lease})["key"]
    post("/v3/lock/unlock", {"key": k}); n += 1
    if time.time() - last > 3: post("/v3/lease/keepalive", {"ID": lease}); last = time.time()
post("/v3/lease/revoke", {"ID": lease})
print(n)
'''


def peer_pairs(cl, k, name):
    ports = cl.cports
    ps = [subprocess.Popen([sys.executable, "-c", PEER, str(ports[i % 3]), name, str(SECONDS)],
                           stdout=subprocess.PIPE, text=True) for i in range(k)]
    t0 = time.time()
    n = sum(int(p.communicate()[0]) for p in ps)
    return n / max(time.time() - t0, SECONDS)


def main():
    redis_port = int(os.environ.get("REDIS_TMP_PORT", "0"))
    if not redis_port:
        raise SystemExit("bench/etcd.py: REDIS_TMP_PORT is not set (run bench/run.sh)")
    cl = Cluster()
    try:
        wr = write_ms(cl, 200 if QUICK else 500)
        nt = notify_ms(cl, 100 if QUICK else 300)
        rows = []
        for k in KS:
            d = dmutex_pairs(cl, k, "bench_d%d" % k, redis_port)
            p = peer_pairs(cl, k, "bench_p%d" % k)
            rows.append((k, d, p))
    finally:
        cl.stop()
    pair_ms = 1000 / rows[0][1]
    out = []
    out.append("## etcd (bench/etcd.py)\n")
    out.append("A 3-member etcd %s cluster on loopback (heartbeat 50 ms, election 500 ms), "
               "%s, %d s per run%s; every figure from this one run.\n" % (
                   subprocess.run(["etcd", "--version"], capture_output=True, text=True)
                   .stdout.split()[2], time.strftime("%Y-%m-%d %H:%M"), SECONDS,
                   " (BENCH_QUICK=1)" if QUICK else ""))
    out.append("| figure | value | ratio |\n|---|---|---|")
    out.append("| one etcd write (a Txn with one put, kept-alive HTTP) | %.2f ms | 1 |" % wr)
    out.append("| a watch notification (put until another client's watch has it) | %.2f ms | "
               "%.2f writes |" % (nt, nt / wr))
    out.append("| uncontended lock+unlock of a mapped mutex (K = 1) | %.2f ms | %.2f writes "
               "(two Txns: the grant, the release) |" % (pair_ms, pair_ms / wr))
    for k, d, p in rows[1:]:
        out.append("| handoff at K = %d (time per acquisition) | %.2f ms | %.2f notifications |"
                   % (k, 1000 / d, (1000 / d) / nt))
    out.append("\n| K processes, one lock | dmutex acquisitions/s | etcd's lock service "
               "(v3lock) acquisitions/s | ratio |\n|---|---|---|---|")
    for k, d, p in rows:
        out.append("| %d | %.0f | %.0f | %.2f |" % (k, d, p, d / p if p else 0))
    text = "\n".join(out) + "\n"
    print(text)
    with open(os.path.join(ROOT, "bench", "etcd-results.md"), "w") as f:
        f.write("<!-- written by bench/etcd.py (make bench) -->\n" + text)


if __name__ == "__main__":
    main()
