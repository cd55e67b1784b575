"""The benchmark of issue 5: runs every figure against one private
redis-server and reports medians and ratios against the targets.

Run through bench/run.sh (which starts and stops the server), not by hand:

    bench/run.sh                 # what `make bench` runs
    BENCH_QUICK=1 bench/run.sh   # short run: fewer K, shorter runs

Writes bench/results.md, bench/throughput.png (via gnuplot) and the raw
numbers in build/bench/results.json; prints the table of targets.

Every contended figure runs K worker processes (bench/cycle.c with the shim
preloaded, or a peer's worker from bench/peers/) that do the same cycle
(lock; INCR; hold; unlock) from a common start until a common deadline, and
report when each lock call was made, returned, and when unlock was called.
Client requests are counted from INFO commandstats deltas over the window:
only top-level commands count, so the commands a script runs inside the
server (which commandstats also counts) are left out, as is the workers' own
INCR. Which plain (non-script) commands a system sends is learnt per system
from a short MONITOR run, where a script's commands are marked "lua".
"""
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import redis

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, "build")
BUILT_SHIM = os.path.join(BUILD, "libdmutex.so")
SHIM = BUILT_SHIM       # replaced by a private copy at start (see main)
CYCLE = os.path.join(BUILD, "bench", "cycle")
PASSTHROUGH = os.path.join(BUILD, "bench", "passthrough")
MANY = os.path.join(BUILD, "bench", "many")
RTT = os.path.join(BUILD, "bench", "rtt")
RWCYCLE = os.path.join(BUILD, "bench", "rwcycle")
CONDWAKE = os.path.join(BUILD, "bench", "condwake")
NODE_WORKER = os.path.join(ROOT, "bench", "peers", "worker.js")
PY_WORKER = os.path.join(ROOT, "bench", "peers", "redispy.py")
PYTHON = "/usr/bin/python3"     # Debian's, which has python3-redis

HOST = "127.0.0.1"
QUICK = os.environ.get("BENCH_QUICK", "") not in ("", "0")
KS = [1, 2, 4, 32] if QUICK else [1, 2, 4, 8, 16, 32]
HOLDS_US = [0, 2000]
RUN_S = 0.6 if QUICK else 2.0
READY_TIMEOUT_S = 120
PASS_N = 5_000_000 if QUICK else 20_000_000
PASS_REPS = 3 if QUICK else 5
CALLGRIND_N = 200_000
PAIRS_S = 0.5 if QUICK else 1.0
PAIRS_REPS = 3
WATCHDOG_N = 10_000
# (lease_ms, hold_ms): a short lease (a renewal round every second) to see
# several rounds quickly, and the default lease (every 10 s) that users run.
WATCHDOG_RUNS = [(3000, 3500)] if QUICK else [(3000, 6500), (30000, 21000)]
STATS_POLL_S = 0.02
RTT_N = 2000
CONDWAKE_N = 200 if QUICK else 500      # signal -> wait returned, between two processes
GAP_US = 2000                       # as the 2 ms hold: a waiter sleeps that long
WINDOWS = 4                         # throughput: median over this many slices of a run
RW_KS = [1, 4] if QUICK else [1, 2, 4, 8]   # readers of the rwlock figure (and 1 writer)
RW_HOLD_US = 1000                   # every read and write section holds 1 ms
RW_WARMUP_S = 0.5

# Commands no Lua script can run (or that none of the scripts here run):
# every call of these is a client request.
TOP_LEVEL = {"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro", "script",
             "subscribe", "unsubscribe", "psubscribe", "punsubscribe", "ssubscribe",
             "sunsubscribe", "ping", "hello", "client", "info", "auth", "select", "quit",
             "multi", "exec", "watch", "unwatch", "discard", "readonly"}
OWN_COMMANDS = {"incr", "incrby"}   # the workers' own INCR (redis-py sends INCRBY key 1)
DRIVER_INFO_PER_WINDOW = 1          # the "before" INFO shows up in the "after" one

# name -> how to run it. `retry`: the peers' default retry settings, or 1 ms.
SYSTEMS = {
    "dmutex-notice":   {"kind": "c", "mode": "notice"},
    "dmutex-fair":     {"kind": "c", "mode": "fair"},
    "dmutex-cache":    {"kind": "c", "mode": "cache"},
    "redlock":         {"kind": "node", "lib": "redlock", "retry": "default"},
    "redlock-1ms":     {"kind": "node", "lib": "redlock", "retry": "1ms"},
    "semaphore":       {"kind": "node", "lib": "semaphore", "retry": "default"},
    "semaphore-1ms":   {"kind": "node", "lib": "semaphore", "retry": "1ms"},
    "redis-py":        {"kind": "py", "retry": "default"},
    "redis-py-1ms":    {"kind": "py", "retry": "1ms"},
}
# notice: fair = false (Redisson-style: a release notice, waiters race);
# fair: the default (FIFO handover in the release script); cache: + lock caching.
DMUTEX_MODES = ["dmutex-notice", "dmutex-fair", "dmutex-cache"]
PEERS = [s for s in SYSTEMS if s not in DMUTEX_MODES]
PEER_DEFAULTS = [s for s in PEERS if not s.endswith("-1ms")]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def median(v):
    return statistics.median(v) if v else float("nan")


def pct(v, p):
    if not v:
        return float("nan")
    s = sorted(v)
    return s[min(len(s) - 1, int(len(s) * p / 100))]


class Bench:
    def __init__(self, port):
        self.port = port
        self.r = redis.Redis(host=HOST, port=port)
        self.tmp = tempfile.mkdtemp(prefix="dmutex-bench.")
        self.run_id = 0
        self.toplevel = {}          # system -> names counted as requests
        self.res = {"quick": QUICK, "run_s": RUN_S}

    # ---- helpers ---------------------------------------------------------

    def config(self, name, mode, entries=None, lease_ms=None, conds=None):
        path = os.path.join(self.tmp, name + ".cfg")
        flags = {"notice": " fair = false;", "fair": " fair = true;",
                 "cache": " cache = true;"}.get(mode, "")
        with open(path, "w") as f:
            f.write('redis = { host = "%s"; port = %d; };\n' % (HOST, self.port))
            if lease_ms:
                f.write("lease_ms = %d;\n" % lease_ms)
            f.write("mutexes = (\n")
            f.write(",\n".join(entries or ['  { symbol = "bench_lock"; name = "%s";%s }'
                                           % (name, flags)]))
            f.write("\n);\n")
            if conds:
                f.write("conds = (\n%s\n);\n" % ",\n".join(conds))
        return path

    def shim_env(self, cfg, log_level=None):
        env = dict(os.environ, LD_PRELOAD=SHIM, DMUTEX_CONFIG=cfg)
        if log_level:
            env["DMUTEX_LOG"] = log_level
        return env

    def commandstats(self):
        return {k[len("cmdstat_"):]: v["calls"]
                for k, v in self.r.info("commandstats").items()}

    def requests(self, system, before, after):
        names = self.toplevel.get(system, TOP_LEVEL)
        n = 0
        for cmd, calls in after.items():
            if cmd.split("|")[0] in names:
                n += calls - before.get(cmd, 0)
        return n - DRIVER_INFO_PER_WINDOW

    # ---- the contended cycle ---------------------------------------------

    def worker_cmd(self, system, key, hold_us):
        s = SYSTEMS[system]
        if s["kind"] == "c":
            cfg = self.config(key.replace(":", "_"), s["mode"])
            return [CYCLE, "run", HOST, str(self.port), key, str(hold_us)], self.shim_env(cfg)
        if s["kind"] == "node":
            return ["node", NODE_WORKER, s["lib"], str(self.port), key, str(hold_us),
                    s["retry"]], None
        return [PYTHON, PY_WORKER, str(self.port), key, str(hold_us), s["retry"]], None

    def run_cycle(self, system, k, hold_us, seconds, monitor=None):
        """K processes of `system` from one start to one deadline. Returns
        the figure's numbers (throughput, waits, handoffs, requests)."""
        self.run_id += 1
        key = "bench:%d" % self.run_id
        cmd, env = self.worker_cmd(system, key, hold_us)
        procs = [subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True, cwd=ROOT) for _ in range(k)]
        try:
            t_end = time.monotonic() + READY_TIMEOUT_S
            for p in procs:
                line = p.stdout.readline()
                if line.strip() != "ready":
                    raise RuntimeError("%s worker did not start (exit %s)" % (system, p.poll()))
                if time.monotonic() > t_end:
                    raise RuntimeError("%s workers too slow to start" % system)
            mon = monitor() if monitor else None
            before = self.commandstats()
            start = time.monotonic_ns()
            deadline = start + int(seconds * 1e9)
            for p in procs:
                p.stdin.write("go %d\n" % deadline)
                p.stdin.flush()
            outs = [json.loads(p.stdout.readline()) for p in procs]
            after = self.commandstats()
            if mon:
                mon.stop()
        finally:
            for p in procs:
                try:
                    p.stdin.close()
                except OSError:
                    pass
            for p in procs:
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        return self.summarise(system, k, hold_us, start, deadline, outs, before, after)

    def summarise(self, system, k, hold_us, start, deadline, outs, before, after):
        acq = [(a[0], a[1], a[2], i) for i, o in enumerate(outs) for a in o["acq"]]
        waits = [(a[1] - a[0]) / 1e3 for a in acq]
        waits += [(c[1] - c[0]) / 1e3 for o in outs for c in o.get("censored", [])]
        # Throughput: the median over WINDOWS slices of the run, so that a
        # burst of load from elsewhere on the machine moves it less.
        span = (deadline - start) / WINDOWS
        per_slice = [0] * WINDOWS
        for a in acq:
            if start <= a[1] <= deadline:
                per_slice[min(WINDOWS - 1, int((a[1] - start) / span))] += 1
        starved = sum(1 for i in range(k) if not any(a[3] == i and a[1] <= deadline for a in acq))
        # A handoff: the next holder was already waiting when the previous
        # one called unlock; from that unlock call to the new lock's return.
        hand = []
        by_t1 = sorted(acq, key=lambda a: a[1])
        for prev, cur in zip(by_t1, by_t1[1:]):
            if cur[3] != prev[3] and cur[0] < prev[2]:
                hand.append((cur[1] - prev[2]) / 1e3)
        req = self.requests(system, before, after)
        return {
            "system": system, "k": k, "hold_us": hold_us,
            "seconds": (deadline - start) / 1e9,
            "acquisitions": len(acq),
            "throughput": median(per_slice) / (span / 1e9),
            "throughput_slices": [n / (span / 1e9) for n in per_slice],
            "wait_p50_us": pct(waits, 50), "wait_p99_us": pct(waits, 99),
            "wait_max_us": max(waits) if waits else float("nan"),
            "starved": starved,
            "hold_us_measured": median([(a[2] - a[1]) / 1e3 for a in acq]),
            "handoff_p50_us": median(hand), "handoffs": len(hand),
            "requests": req, "req_per_acq": req / len(acq) if acq else float("nan"),
            "fail": sum(o.get("fail", 0) for o in outs),
        }

    # ---- which plain commands each system sends --------------------------

    def monitor(self):
        """A MONITOR session in a thread; .stop() returns the lines."""
        bench = self

        class Mon:
            def __init__(self):
                self.lines = []
                self.conn = redis.Redis(host=HOST, port=bench.port)
                self.m = self.conn.monitor().__enter__()
                self.done = False
                self.t = threading.Thread(target=self.read, daemon=True)
                self.t.start()

            def read(self):
                try:
                    for ev in self.m.listen():
                        self.lines.append(ev)
                        if self.done:
                            break
                except Exception:   # the connection closed under it: done
                    pass

            def stop(self):
                self.done = True
                bench.r.ping()      # one more line so that the reader sees `done`
                self.t.join(timeout=5)
                try:
                    self.m.connection.disconnect()
                except Exception:
                    pass
                self.lines = list(self.lines)
                bench.calibration_lines = self.lines

        return Mon()

    def learn_toplevel(self):
        """For each system, a short K=2 run under MONITOR: the plain commands
        its clients send at top level are counted as requests from then on
        (a script's commands show as "lua" and are not)."""
        log("requests: learning each system's top-level commands (MONITOR, K=2)")
        driver = self.r.client_info()["addr"]       # its INFO and PING are not a system's
        self.toplevel_seen = {}
        for system in DMUTEX_MODES + PEER_DEFAULTS:
            self.calibration_lines = []
            self.run_cycle(system, 2, 0, 0.3, monitor=self.monitor)
            client, lua = set(), set()
            for ev in self.calibration_lines:
                cmd = ev["command"].split(" ")[0].strip('"').lower()
                src = ev.get("client_type") or ""
                if src == "lua":
                    lua.add(cmd)
                elif "%s:%s" % (ev.get("client_address"), ev.get("client_port")) != driver:
                    client.add(cmd)
            plain = client - TOP_LEVEL - OWN_COMMANDS
            both = plain & lua
            if both:
                log("requests: warning: %s sends %s itself and from scripts: "
                    "commandstats counts both" % (system, ", ".join(sorted(both))))
            self.toplevel_seen[system] = sorted(client - OWN_COMMANDS)
            log("  %-13s top-level: %s" % (system, ", ".join(self.toplevel_seen[system])))
            # The 1 ms variants are the same client with another delay.
            for s in (system, system + "-1ms"):
                self.toplevel[s] = TOP_LEVEL | plain
        self.res["toplevel_commands"] = self.toplevel_seen

    # ---- figures -------------------------------------------------------------

    def fig_passthrough(self):
        log("passthrough: unmapped lock+unlock, without and with the shim (100 mutexes mapped)")
        entries = ['  { symbol = "mapped"; index = %d; name = "pt%d"; required = false; }'
                   % (i, i) for i in range(100)]
        # required = false: under valgrind the shim is also preloaded into
        # valgrind's own launcher, which has no `mapped`; the timed runs
        # check the log for "100 mutexes mapped".
        cfg = self.config("passthrough", None, entries)
        out = {}
        for t in (1, 2):
            plain, shim = [], []
            for _ in range(PASS_REPS):
                p = subprocess.run([PASSTHROUGH, str(t), str(PASS_N)], capture_output=True,
                                   text=True, check=True)
                plain.append(json.loads(p.stdout)["ns_per_pair"])
                p = subprocess.run([PASSTHROUGH, str(t), str(PASS_N)], capture_output=True,
                                   text=True, check=True, env=self.shim_env(cfg, "info"))
                if "100 mutexes mapped" not in p.stderr:
                    raise RuntimeError("passthrough: the shim did not map the 100 mutexes:\n"
                                       + p.stderr)
                shim.append(json.loads(p.stdout)["ns_per_pair"])
            out["t%d" % t] = {"plain_ns": median(plain), "shim_ns": median(shim),
                              "ratio": median(shim) / median(plain),
                              "plain_all": plain, "shim_all": shim}
            log("  %d thread(s): %.2f ns -> %.2f ns per pair (x%.2f)"
                % (t, median(plain), median(shim), median(shim) / median(plain)))
        out["instructions"] = self.instructions(cfg)
        out["rw_instructions"] = self.instructions(cfg, rw=True)
        self.res["passthrough"] = out

    def instructions(self, cfg, rw=False):
        """Instructions per pair, plain and preloaded: perf stat if the
        machine has a hardware counter, else callgrind (only bench_loop and
        what it calls: --toggle-collect). rw: rdlock+unlock pairs of an
        unlisted rwlock (bench_rw_loop)."""
        extra = ["rw"] if rw else []
        loop = "bench_rw_loop" if rw else "bench_loop"
        perf = shutil.which("perf")
        if perf:
            p = subprocess.run([perf, "stat", "-x,", "-e", "instructions:u", "true"],
                               capture_output=True, text=True)
            if p.returncode == 0 and "<not supported>" not in p.stderr \
                    and "<not counted>" not in p.stderr:
                return self.instructions_perf(perf, cfg, extra)
            log("  perf: no hardware instruction counter here: using callgrind")
        res = {"tool": "callgrind"}
        for name, env in (("plain", None), ("shim", self.shim_env(cfg))):
            outf = os.path.join(self.tmp, "callgrind." + name)
            subprocess.run(["valgrind", "--tool=callgrind", "--toggle-collect=" + loop,
                            "--callgrind-out-file=" + outf, PASSTHROUGH, "1",
                            str(CALLGRIND_N)] + extra, capture_output=True, text=True,
                           check=True, env=env)
            with open(outf) as f:
                total = next(int(l.split()[1]) for l in f if l.startswith("summary:"))
            res[name] = total / CALLGRIND_N
        res["extra"] = res["shim"] - res["plain"]
        log("  instructions per %s pair (%s): %.1f -> %.1f (+%.1f)"
            % ("rwlock" if rw else "mutex", res["tool"], res["plain"], res["shim"], res["extra"]))
        return res

    def instructions_perf(self, perf, cfg, extra):
        res = {"tool": "perf stat"}
        for name, env in (("plain", None), ("shim", self.shim_env(cfg))):
            counts = []
            for n in (CALLGRIND_N, 10 * CALLGRIND_N):
                p = subprocess.run([perf, "stat", "-x,", "-e", "instructions:u", PASSTHROUGH,
                                    "1", str(n)] + extra, capture_output=True, text=True,
                                   check=True, env=env)
                counts.append(int(p.stderr.strip().splitlines()[-1].split(",")[0]))
            res[name] = (counts[1] - counts[0]) / (9 * CALLGRIND_N)
        res["extra"] = res["shim"] - res["plain"]
        log("  instructions per pair (perf): %.1f -> %.1f (+%.1f)"
            % (res["plain"], res["shim"], res["extra"]))
        return res

    def fig_uncontended(self):
        log("uncontended: lock+unlock pairs of one process, and PING on its own connection")
        out = {}
        for system in DMUTEX_MODES:
            mode = SYSTEMS[system]["mode"]
            pair, ping, rate = [], [], []
            for rep in range(PAIRS_REPS):
                cfg = self.config("pairs_%s_%d" % (mode, rep), mode)
                p = subprocess.run([CYCLE, "pairs", HOST, str(self.port), str(PAIRS_S), "1"],
                                   capture_output=True, text=True, check=True,
                                   env=self.shim_env(cfg))
                o = json.loads(p.stdout)
                pair.append(o["median_ns"] / 1e3)
                ping.append(o["ping_ns"][0] / 1e3)
                if mode == "cache":
                    p = subprocess.run([CYCLE, "pairs", HOST, str(self.port), str(PAIRS_S), "0"],
                                       capture_output=True, text=True, check=True,
                                       env=self.shim_env(cfg))
                    o = json.loads(p.stdout)
                    rate.append(o["n"] / (o["ns"] / 1e9))
            out[system] = {"pair_us": median(pair), "ping_us": median(ping),
                           "ratio": median(pair) / median(ping)}
            if rate:
                out[system]["pairs_per_s"] = median(rate)
            log("  %-13s pair %.1f us, PING %.1f us (x%.2f)%s"
                % (system, median(pair), median(ping), median(pair) / median(ping),
                   ", untimed %.0f pairs/s" % median(rate) if rate else ""))
        self.res["uncontended"] = out

    def fig_rwlock(self):
        """K reader processes and 1 writer process on one cluster-wide
        rwlock, every section 1 ms: reads/s of all readers, writes/s."""
        log("rwlock: K readers and 1 writer, %d us sections, %.1f s each" % (RW_HOLD_US, RUN_S))
        path = os.path.join(self.tmp, "rw.cfg")
        with open(path, "w") as f:
            f.write('redis = { host = "%s"; port = %d; };\n' % (HOST, self.port))
            f.write('rwlocks = ( { symbol = "bench_rw"; name = "bench_rw"; } );\n')
        out = []
        for k in RW_KS:
            self.run_id += 1
            key = "bench:rw:%d" % self.run_id
            start = time.monotonic_ns() + int(RW_WARMUP_S * 1e9)
            end = start + int(RUN_S * 1e9)
            args = [HOST, str(self.port), key, str(RW_HOLD_US), str(start), str(end)]
            procs = [subprocess.Popen([RWCYCLE, "read"] + args, env=self.shim_env(path),
                                      stdout=subprocess.PIPE, text=True) for _ in range(k)]
            procs.append(subprocess.Popen([RWCYCLE, "write"] + args, env=self.shim_env(path),
                                          stdout=subprocess.PIPE, text=True))
            res = [json.loads(p.communicate(timeout=READY_TIMEOUT_S)[0]) for p in procs]
            reads = sum(r["n"] for r in res[:-1]) / (res[0]["ns"] / 1e9)
            writes = res[-1]["n"] / (res[-1]["ns"] / 1e9)
            out.append({"k": k, "reads_per_s": reads, "writes_per_s": writes})
            log("  K = %d: %.0f reads/s, %.0f writes/s" % (k, reads, writes))
        self.res["rwlock"] = out

    def fig_watchdog(self):
        self.res["watchdog"] = [self.watchdog(lease, hold) for lease, hold in WATCHDOG_RUNS]

    def watchdog(self, lease_ms, hold_ms):
        log("watchdog: %d held mapped mutexes, lease %d ms, held %d ms"
            % (WATCHDOG_N, lease_ms, hold_ms))
        entries = ['  { symbol = "many"; index = %d; name = "many%d"; }' % (i, i)
                   for i in range(WATCHDOG_N)]
        cfg = self.config("watchdog%d" % lease_ms, None, entries, lease_ms=lease_ms)
        p = subprocess.Popen([MANY, str(WATCHDOG_N), str(hold_ms)], stdout=subprocess.PIPE,
                             text=True, env=self.shim_env(cfg))
        locked = json.loads(p.stdout.readline())
        # Poll the renewal count; a burst of increments is one round trip
        # of the watchdog (it pipelines every renewal of a round).
        samples = []
        calls = lambda: self.r.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
        first = last = calls()
        hold_end = time.monotonic() + hold_ms / 1e3 - 0.1
        while time.monotonic() < hold_end:
            time.sleep(STATS_POLL_S)
            cur = calls()
            samples.append(cur - last)
            last = cur
        cpu = json.loads(p.stdout.readline())
        p.wait()
        bursts, sizes, run = 0, [], 0
        for d in samples + [0]:
            if d:
                run += d
            elif run:
                bursts += 1
                sizes.append(run)
                run = 0
        renewals = last - first
        out = {"n": WATCHDOG_N, "lease_ms": lease_ms, "lock_all_ms": locked["locked_ms"],
               "cpu_ms": cpu["cpu_ms"], "wall_ms": cpu["wall_ms"],
               "cpu_pct": 100 * cpu["cpu_ms"] / cpu["wall_ms"], "renewals": renewals,
               "rounds": bursts, "per_round": renewals / bursts if bursts else 0,
               "round_sizes": sizes}
        log("  locked all in %.0f ms; %d renewals in %d rounds (%.0f per round trip); "
            "CPU %.2f%% of a core" % (locked["locked_ms"], renewals, bursts, out["per_round"],
                                       out["cpu_pct"]))
        return out

    def fig_rtt(self):
        """The round trips: back to back (the usual meaning), after a 2 ms
        sleep (as a lock waiter wakes), and a notice's delivery to a blocked
        subscriber after 2 ms (the floor of a handoff)."""
        out = {}
        for name, mode, gap in (("ping", "ping", 0), ("ping_idle", "ping", GAP_US),
                                ("notice_idle", "notice", GAP_US)):
            p = subprocess.run([RTT, mode, HOST, str(self.port), str(RTT_N), str(gap)],
                               capture_output=True, text=True, check=True)
            out[name] = json.loads(p.stdout)
        log("round trips: PING %.1f us back to back, %.1f us after 2 ms idle; "
            "notice to a blocked subscriber after 2 ms idle %.1f us (p50)"
            % (out["ping"]["p50_us"], out["ping_idle"]["p50_us"], out["notice_idle"]["p50_us"]))
        return out

    def fig_condwake(self):
        """A listed condition variable between two processes (bench/condwake.c):
        pthread_cond_signal called in A -> pthread_cond_wait returned in B,
        B asleep for 2 ms before, as the notice floor's subscriber is."""
        log("cond wake-up: a mapped mutex and a listed cond, two processes, %d rounds"
            % CONDWAKE_N)
        cfg = self.config("condwake", "fair",
                          conds=['  { symbol = "bench_cond"; name = "condwake_cond"; }'])
        p = subprocess.run([CONDWAKE, str(CONDWAKE_N), str(GAP_US)], capture_output=True,
                           text=True, check=True, env=self.shim_env(cfg))
        out = json.loads(p.stdout)
        floor = self.res["rtt"]["notice_idle"]["p50_us"]
        log("  signal -> wait returned: p50 %.1f us, p99 %.1f us (x%.2f the notice floor)"
            % (out["p50_us"], out["p99_us"], out["p50_us"] / floor))
        self.res["condwake"] = out

    def fig_sweep(self):
        self.res["rtt"] = self.fig_rtt()
        self.res["rtt_us"] = self.res["rtt"]["ping"]["p50_us"]
        runs = []
        for hold in HOLDS_US:
            for k in KS:
                for system in SYSTEMS:
                    if k == 1 and system.endswith("-1ms"):
                        continue    # nothing to retry without contention
                    r = self.run_cycle(system, k, hold, RUN_S)
                    runs.append(r)
                    log("  hold %4d us K=%2d %-13s %8.0f acq/s  p99 wait %9s  max %9s  "
                        "%5.2f req/acq%s%s" % (hold, k, system, r["throughput"],
                                               fmt_us(r["wait_p99_us"]), fmt_us(r["wait_max_us"]),
                                               r["req_per_acq"],
                                               "  handoff %.0f us" % r["handoff_p50_us"]
                                               if r["handoffs"] else "",
                                               "  %d starved" % r["starved"] if r["starved"] else ""))
        self.res["sweep"] = runs


# ---- report -------------------------------------------------------------------

def find(runs, system, k, hold):
    for r in runs:
        if r["system"] == system and r["k"] == k and r["hold_us"] == hold:
            return r
    return None


def verdict(value, target, higher_is_better):
    if value != value:      # NaN
        return "no data"
    ok = value >= target if higher_is_better else value <= target
    if ok:
        return "met"
    if higher_is_better:
        return "MISSED by %.0f%%" % (100 * (target - value) / target)
    return "MISSED by %.0f%%" % (100 * (value - target) / target)


def targets(res):
    rows = []       # (figure, measured text, target text, verdict)
    pt = res["passthrough"]
    for t in (1, 2):
        x = pt["t%d" % t]
        rows.append(("unmapped lock+unlock, %d thread%s: shim / none" % (t, "s" if t > 1 else ""),
                     "%.2f / %.2f ns = x%.2f" % (x["shim_ns"], x["plain_ns"], x["ratio"]),
                     "<= x1.3", verdict(x["ratio"], 1.3, False)))
    ins = pt["instructions"]
    rows.append(("unmapped pair: extra instructions (%s)" % ins["tool"],
                 "%.1f -> %.1f: +%.1f" % (ins["plain"], ins["shim"], ins["extra"]),
                 "<= 15", verdict(ins["extra"], 15, False)))
    ins = pt.get("rw_instructions")
    if ins:
        rows.append(("unlisted rwlock rdlock+unlock: extra instructions (%s)" % ins["tool"],
                     "%.1f -> %.1f: +%.1f" % (ins["plain"], ins["shim"], ins["extra"]),
                     "<= 15", verdict(ins["extra"], 15, False)))
    rtt = res["rtt_us"]
    un = res["uncontended"]
    for s in ("dmutex-notice", "dmutex-fair"):
        rows.append(("uncontended mapped pair / PING (%s)" % s,
                     "%.1f / %.1f us = x%.2f" % (un[s]["pair_us"], un[s]["ping_us"], un[s]["ratio"]),
                     "<= x2.2", verdict(un[s]["ratio"], 2.2, False)))
    runs = res["sweep"]
    f = find(runs, "dmutex-fair", 2, 2000)
    rows.append(("handoff, fair (K=2, 2 ms hold): median / RTT",
                 "%.0f / %.0f us = x%.2f" % (f["handoff_p50_us"], rtt, f["handoff_p50_us"] / rtt),
                 "<= x1.3", verdict(f["handoff_p50_us"] / rtt, 1.3, False)))
    kmax, kmin = max(KS), 2
    for s in DMUTEX_MODES:
        a, b = find(runs, s, kmax, 0), find(runs, s, kmin, 0)
        rows.append(("%s: throughput K=%d / K=%d, no hold" % (s, kmax, kmin),
                     "%.0f / %.0f = x%.2f" % (a["throughput"], b["throughput"],
                                              a["throughput"] / b["throughput"]),
                     ">= x0.8", verdict(a["throughput"] / b["throughput"], 0.8, True)))
    for s in DMUTEX_MODES:
        worst, wk = None, None
        for k in KS[1:]:
            r = find(runs, s, k, 2000)
            limit = 1e6 / (r["hold_us_measured"] + rtt)
            frac = r["throughput"] / limit
            if worst is None or frac < worst:
                worst, wk, wr, wl = frac, k, r, limit
        rows.append(("%s: 2 ms hold, worst K (K=%d) / limit" % (s, wk),
                     "%.0f / %.0f acq/s = %.0f%%" % (wr["throughput"], wl, 100 * worst),
                     ">= 90%", verdict(worst, 0.9, True)))
    for s in DMUTEX_MODES:
        worst = max((r for r in runs if r["system"] == s), key=lambda r: r["req_per_acq"])
        rows.append(("%s: requests per acquisition, worst (K=%d, hold %d us)"
                     % (s, worst["k"], worst["hold_us"]),
                     "%.2f" % worst["req_per_acq"], "<= 2.2",
                     verdict(worst["req_per_acq"], 2.2, False)))
    c = un["dmutex-cache"]
    rows.append(("lock caching, one process", "%.0f pairs/s" % c["pairs_per_s"],
                 ">= 1,000,000", verdict(c["pairs_per_s"], 1e6, True)))
    f = find(runs, "dmutex-cache", 2, 2000)
    rows.append(("lock caching, a second process asks: after the CS ends / RTT",
                 "%.0f / %.0f us = x%.2f" % (f["handoff_p50_us"], rtt, f["handoff_p50_us"] / rtt),
                 "<= x1.0", verdict(f["handoff_p50_us"] / rtt, 1.0, False)))
    for w in res["watchdog"]:
        rows.append(("watchdog, %d holds, lease %d ms: renewals per round trip"
                     % (w["n"], w["lease_ms"]),
                     "%d in %d rounds: %.0f" % (w["renewals"], w["rounds"], w["per_round"]),
                     ">= 100", verdict(w["per_round"], 100, True)))
        rows.append(("watchdog, %d holds, lease %d ms (renewal every %d s): CPU"
                     % (w["n"], w["lease_ms"], w["lease_ms"] // 3000),
                     "%.2f%% of a core" % w["cpu_pct"], "< 1%", verdict(w["cpu_pct"], 1.0, False)))

    def best_peer(k, hold):
        cands = [find(runs, p, k, hold) for p in PEERS]
        return max((r for r in cands if r), key=lambda r: r["throughput"])
    bp = best_peer(1, 0)
    for s, t in (("dmutex-fair", 1.4), ("dmutex-cache", 2.5)):
        r = find(runs, s, 1, 0)
        rows.append(("lock+INCR+unlock, K=1: %s / best peer (%s)" % (s, bp["system"]),
                     "%.0f / %.0f = x%.2f" % (r["throughput"], bp["throughput"],
                                              r["throughput"] / bp["throughput"]),
                     ">= x%.1f" % t, verdict(r["throughput"] / bp["throughput"], t, True)))
    bp = best_peer(4, 0)
    for s in DMUTEX_MODES:
        r = find(runs, s, 4, 0)
        rows.append(("lock+INCR+unlock, K=4: %s / best peer (%s)" % (s, bp["system"]),
                     "%.0f / %.0f = x%.2f" % (r["throughput"], bp["throughput"],
                                              r["throughput"] / bp["throughput"]),
                     ">= x1.3", verdict(r["throughput"] / bp["throughput"], 1.3, True)))
    return rows


def condwake_line(res):
    cw, floor = res["condwake"], res["rtt"]["notice_idle"]["p50_us"]
    return ("condition variable wake-up between two processes (a mapped mutex, a listed "
            "cond; pthread_cond_signal in A -> pthread_cond_wait returned in B, after 2 ms "
            "asleep): p50 %.0f us = x%.2f the notice floor, p99 %.0f us = x%.2f"
            % (cw["p50_us"], cw["p50_us"] / floor, cw["p99_us"], cw["p99_us"] / floor))


def context(res):
    """Lines that help read the targets: handoffs against the notice floor."""
    runs, rt = res["sweep"], res["rtt"]
    floor = rt["notice_idle"]["p50_us"]
    out = [condwake_line(res)]
    for s in ("dmutex-fair", "dmutex-cache"):
        r = find(runs, s, 2, 2000)
        out.append("%s handoff (K=2, 2 ms hold): %.0f us = x%.2f the back-to-back PING, "
                   "x%.2f the PING after 2 ms idle, x%.2f the notice floor"
                   % (s, r["handoff_p50_us"], r["handoff_p50_us"] / rt["ping"]["p50_us"],
                      r["handoff_p50_us"] / rt["ping_idle"]["p50_us"], r["handoff_p50_us"] / floor))
    return out


def machine():
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    rv = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout
    m = re.search(r"v=(\S+)", rv)
    return {"nproc": os.cpu_count(), "cpu": cpu, "kernel": platform.release(),
            "redis": m.group(1) if m else "?", "node": subprocess.run(
                ["node", "--version"], capture_output=True, text=True).stdout.strip(),
            "python": platform.python_version(), "redis_py": redis.__version__,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "load": open("/proc/loadavg").read().split()[:3]}


def table(rows, headers):
    w = [max(len(str(r[i])) for r in rows + [headers]) for i in range(len(headers))]
    line = lambda r: "| " + " | ".join(str(c).ljust(w[i]) for i, c in enumerate(r)) + " |"
    return "\n".join([line(headers), "|" + "|".join("-" * (x + 2) for x in w) + "|"]
                     + [line(r) for r in rows])


def sweep_table(runs, hold):
    rows = []
    for s in SYSTEMS:
        cells = [s]
        for k in KS:
            r = find(runs, s, k, hold)
            cells.append("-" if not r else "%.0f / %s / %s / %.1f%s" % (
                r["throughput"], fmt_us(r["wait_p99_us"]), fmt_us(r["wait_max_us"]),
                r["req_per_acq"], " (%d starved)" % r["starved"] if r["starved"] else ""))
        rows.append(cells)
    return table(rows, ["system"] + ["K=%d" % k for k in KS])


def fmt_us(us):
    if us != us:
        return "-"
    if us >= 1e6:
        return "%.1f s" % (us / 1e6)
    if us >= 1e3:
        return "%.1f ms" % (us / 1e3)
    return "%.0f us" % us


WAIT_FLOOR_MS = 0.01


def plot(res, out_png, tmp):
    if not shutil.which("gnuplot"):
        log("plot: gnuplot not found, no %s" % out_png)
        return
    runs = res["sweep"]
    datf = {}
    for hold in HOLDS_US:
        for s in SYSTEMS:
            path = os.path.join(tmp, "plot_%s_%d.dat" % (s, hold))
            with open(path, "w") as f:
                for k in KS:
                    r = find(runs, s, k, hold)
                    if r:
                        # A p99 under 10 us (a cached lock: no round trip) is
                        # drawn at the bottom edge.
                        f.write("%d %f %f\n" % (k, max(r["throughput"], 0.1),
                                                max(r["wait_p99_us"] / 1e3, WAIT_FLOOR_MS)))
            datf[(s, hold)] = path
    styles = {"dmutex-notice": "lw 3 lc rgb '#1f4e9c' pt 7", "dmutex-fair": "lw 3 lc rgb '#2a9d3a' pt 5",
              "dmutex-cache": "lw 3 lc rgb '#c0392b' pt 9",
              "redlock": "lw 1.5 lc rgb '#8e44ad' pt 4", "redlock-1ms": "lw 1.5 dt 2 lc rgb '#8e44ad' pt 4",
              "semaphore": "lw 1.5 lc rgb '#e67e22' pt 6", "semaphore-1ms": "lw 1.5 dt 2 lc rgb '#e67e22' pt 6",
              "redis-py": "lw 1.5 lc rgb '#7f8c8d' pt 8", "redis-py-1ms": "lw 1.5 dt 2 lc rgb '#7f8c8d' pt 8"}
    g = ["set terminal pngcairo size 1400,1000 font 'sans,10'",
         "set output '%s'" % out_png,
         "set multiplot layout 2,2 title 'dmutex vs peers: one mutex, K processes, "
         "lock; INCR; hold; unlock (%s)'" % res["machine"]["date"],
         "set logscale x 2", "set xtics (%s)" % ", ".join(str(k) for k in KS),
         "set grid", "set xlabel 'K processes'", "set key bottom left font ',9'"]
    first = True
    for hold in HOLDS_US:
        hn = "no hold" if hold == 0 else "%d ms hold" % (hold // 1000)
        for col, ylabel, title in ((2, "acquisitions/s", "throughput, %s" % hn),
                                   (3, "p99 wait (ms)", "p99 wait for the lock, %s" % hn)):
            curves = ["'%s' using 1:%d with linespoints %s title '%s'"
                      % (datf[(s, hold)], col, styles[s], s) for s in SYSTEMS]
            if col == 2 and hold:
                limit = 1e6 / (hold + res["rtt_us"])
                curves.append("%f with lines lw 1 dt 3 lc rgb 'black' title "
                              "'1/(%d ms + RTT)'" % (limit, hold // 1000))
            g += ["set logscale y", "set ylabel '%s'" % ylabel, "set title '%s'" % title,
                  "set yrange [%s:*]" % (WAIT_FLOOR_MS if col == 3 else "*"),
                  "set key %s" % ("top left" if col == 3 else "bottom left"),
                  "set key" if first or (col == 2 and hold) else "unset key",
                  "plot " + ", ".join(curves)]
            first = False
    g.append("unset multiplot")
    gp = os.path.join(tmp, "plot.gp")
    with open(gp, "w") as f:
        f.write("\n".join(g) + "\n")
    subprocess.run(["gnuplot", gp], check=True)


def report(res, out_dir, tmp):
    rows = targets(res)
    m = res["machine"]
    tgt = table(rows, ["figure", "measured (median)", "target", "verdict"])
    print()
    print("dmutex benchmark%s: %s, %d cores (%s), kernel %s, redis %s; load %s; shim at %s"
          % (" (BENCH_QUICK)" if QUICK else "", m["date"], m["nproc"], m["cpu"], m["kernel"],
             m["redis"], " ".join(m["load"]), res["shim_commit"]))
    rt = res["rtt"]
    rtt_line = ("Round trip (C hiredis client, p50): PING %.1f us back to back (the RTT of "
                "every ratio), %.1f us after 2 ms idle; a PUBLISH reaching a subscriber "
                "blocked for 2 ms: %.1f us (the floor of a notice handoff on this machine)."
                % (rt["ping"]["p50_us"], rt["ping_idle"]["p50_us"], rt["notice_idle"]["p50_us"]))
    print(rtt_line + "\n")
    print(tgt)
    missed = sum(1 for r in rows if r[3].startswith("MISSED"))
    print("\n%d of %d targets met" % (len(rows) - missed, len(rows)))
    ctx = context(res)
    print("\n".join(ctx))
    md = ["# dmutex benchmark results", "",
          "Generated by `make bench`%s on %s." % (" with BENCH_QUICK=1" if QUICK else "", m["date"]),
          "",
          "Machine: %d cores (`nproc`), %s, Linux %s, redis-server %s, node %s, "
          "python %s with redis-py %s; load average at the end %s. Shim built at commit %s."
          % (m["nproc"], m["cpu"], m["kernel"], m["redis"], m["node"], m["python"],
             m["redis_py"], " ".join(m["load"]), res["shim_commit"]),
          "",
          rtt_line, "",
          "Contended runs: %.1f s each, one run per point; throughput is the median over %d "
          "slices of the run, waits and handoffs the p50/p99/max over all its acquisitions. "
          "A handoff is timed from the holder's call of unlock to the return of lock in the "
          "process that was waiting." % (RUN_S, WINDOWS),
          "", "## Targets", "", tgt, "",
          "%d of %d targets met." % (len(rows) - missed, len(rows)), ""]
    md += ["- " + c for c in ctx] + [""]
    for hold in HOLDS_US:
        md += ["## K processes, %s" % ("no hold" if hold == 0 else "%d ms hold" % (hold // 1000)),
               "", "Each cell: throughput (acquisitions/s) / p99 wait / longest wait / client "
               "requests per acquisition; `(n starved)`: n processes never got the lock "
               "within the run.", "",
               sweep_table(res["sweep"], hold), ""]
    md += ["## Top-level commands each system sends (learnt under MONITOR)", ""]
    for s, cmds in res.get("toplevel_commands", {}).items():
        md.append("- %s: %s" % (s, ", ".join(cmds)))
    cw = res["condwake"]
    md += ["", "## Condition variable wake-up", "",
           "Two processes, `bench_lock` mapped and `bench_cond` listed (`bench/condwake.c`): "
           "A signals while B has slept 2 ms in its wait; timed from A's call of "
           "pthread_cond_signal to the return of B's pthread_cond_wait (B has its mutex "
           "back: the notice, B's wake-up and the handover of the lock are in it). "
           "%d rounds." % cw["n"], "",
           table([["p50", "%.0f us" % cw["p50_us"],
                   "x%.2f" % (cw["p50_us"] / rt["notice_idle"]["p50_us"])],
                  ["p99", "%.0f us" % cw["p99_us"],
                   "x%.2f" % (cw["p99_us"] / rt["notice_idle"]["p50_us"])],
                  ["max", "%.0f us" % cw["max_us"], "-"]],
                 ["wake-up", "measured", "against the notice floor's p50 (%.1f us)"
                  % rt["notice_idle"]["p50_us"]])]
    md += ["", "## Watchdog", ""]
    for w in res["watchdog"]:
        md += ["- %d mapped mutexes held by one process, lease %d ms (renewal every %d ms), "
               "held %.0f ms: %d renewals in %d rounds (sizes %s); process CPU %.1f ms (%.2f%% "
               "of a core). Locking them all took %.0f ms."
               % (w["n"], w["lease_ms"], w["lease_ms"] // 3, w["wall_ms"], w["renewals"],
                  w["rounds"], ", ".join(str(x) for x in w["round_sizes"]), w["cpu_ms"],
                  w["cpu_pct"], w["lock_all_ms"])]
    if res.get("rwlock"):
        md += ["", "## Read-write lock: K readers, 1 writer", "",
               "K reader processes and one writer process on one cluster-wide rwlock "
               "(`rwlocks`), every section 1 ms (a GET or an INCR, then the sleep); the "
               "writer pauses 10 ms between writes.", "",
               table([[str(r["k"]), "%.0f" % r["reads_per_s"], "%.0f" % r["writes_per_s"]]
                      for r in res["rwlock"]], ["K readers", "reads/s (all readers)",
                                                "writes/s"])]
    md += ["", "![throughput and p99 wait against K](throughput.png)", ""]
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write("\n".join(md))
    plot(res, os.path.join(out_dir, "throughput.png"), tmp)
    log("wrote bench/results.md and bench/throughput.png")


def snapshot_shim(tmp):
    """Every figure runs one build of the shim: a copy taken now, since
    build/ is shared and may be rebuilt while the benchmark runs."""
    global SHIM
    SHIM = os.path.join(tmp, "libdmutex.so")
    shutil.copy2(BUILT_SHIM, SHIM)
    head = subprocess.run(["git", "-C", ROOT, "log", "-1", "--format=%h %cd",
                           "--date=format:%Y-%m-%d %H:%M"], capture_output=True,
                          text=True).stdout.strip()
    # The tree is shared: the build may hold someone's edits not yet committed.
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--", "shim"],
                           capture_output=True, text=True).stdout.split("\n")
    dirty = [l[3:] for l in dirty if l.strip()]
    return (head or "unknown") + (" + uncommitted " + ", ".join(dirty) if dirty else "")


def main():
    port = int(os.environ["REDIS_TMP_PORT"])
    b = Bench(port)
    b.res["shim_commit"] = snapshot_shim(b.tmp)
    t0 = time.monotonic()
    try:
        b.res["machine"] = machine()
        b.fig_passthrough()
        b.fig_uncontended()
        b.fig_watchdog()
        b.fig_rwlock()
        b.learn_toplevel()
        log("K processes on one mutex: %s, %.1f s each" % (", ".join(map(str, KS)), RUN_S))
        b.fig_sweep()
        b.fig_condwake()
        b.res["machine"]["load"] = open("/proc/loadavg").read().split()[:3]
        b.res["elapsed_s"] = time.monotonic() - t0
        os.makedirs(os.path.join(BUILD, "bench"), exist_ok=True)
        with open(os.path.join(BUILD, "bench", "results.json"), "w") as f:
            json.dump(b.res, f, indent=1)
        report(b.res, os.path.join(ROOT, "bench"), b.tmp)
        log("make bench took %.0f s" % (time.monotonic() - t0))
    finally:
        shutil.rmtree(b.tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
