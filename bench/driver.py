"""The benchmark (issues 5 and 11): runs every figure against one private
redis-server and reports medians and ratios against the targets of issue 11.

Run through bench/run.sh (which starts and stops the server), not by hand:

    bench/run.sh                 # what `make bench` runs
    BENCH_QUICK=1 bench/run.sh   # short run: the same figures, shorter runs

Writes bench/results.md, bench/throughput.png (via gnuplot), the raw
numbers in build/bench/results.json and README.md's Performance section
(between its markers); prints the table of targets and the misses' causes.

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
import glob
import hashlib
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
BARE = os.path.join(BUILD, "bench", "bare.so")
MANY = os.path.join(BUILD, "bench", "many")
RTT = os.path.join(BUILD, "bench", "rtt")
RWCYCLE = os.path.join(BUILD, "bench", "rwcycle")
CONDWAKE = os.path.join(BUILD, "bench", "condwake")
NAMES = os.path.join(BUILD, "bench", "names")
DMUTEX = os.path.join(BUILD, "dmutex")
LUA_DIR = os.path.join(ROOT, "shim", "lua")
README = os.path.join(ROOT, "README.md")
NODE_WORKER = os.path.join(ROOT, "bench", "peers", "worker.js")
PY_WORKER = os.path.join(ROOT, "bench", "peers", "redispy.py")
PYTHON = "/usr/bin/python3"     # Debian's, which has python3-redis

HOST = "127.0.0.1"
QUICK = os.environ.get("BENCH_QUICK", "") not in ("", "0")
KS = [1, 2, 4, 8, 16, 32]                   # BENCH_QUICK too: the targets name every K
PEER_KS = [4, 8, 16, 32]                    # the K of the throughput target
NAMES_LIVE = [10, 100_000]          # live names: the two ends of the names target
SLOWLOG_LEN = 200_000               # SLOWLOG entries kept around the scripts' fixed run
SLOWLOG_SCRIPTS_US = 3              # scripts take longer, the commands they run mostly less
SCRIPTS_RUN_S = 0.3 if QUICK else 1.0    # each run of the scripts' pass at SLOWLOG_SCRIPTS_US
SCRIPTS_ALL_RUN_S = 0.2                     # the pass at 0: about 20 entries per lock+unlock
HOLDS_US = [0, 2000]
RUN_S = 0.5 if QUICK else 2.0
READY_TIMEOUT_S = 120
PASS_N = 5_000_000 if QUICK else 20_000_000
PASS_REPS = 3 if QUICK else 21     # the unmapped pair: runs of each kind (their median)
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
HANDOFF_ROUNDS = 2 if QUICK else 3
HOLD_ROUNDS = 3                     # runs of the default mode at each K for the 2 ms-hold target
HANDOFF_FLOOR_N = 300 if QUICK else 1000  # notices per floor (2 ms apart)
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
    "dmutex-fifo":     {"kind": "c", "mode": "fifo"},
    "redlock":         {"kind": "node", "lib": "redlock", "retry": "default"},
    "redlock-1ms":     {"kind": "node", "lib": "redlock", "retry": "1ms"},
    "semaphore":       {"kind": "node", "lib": "semaphore", "retry": "default"},
    "semaphore-1ms":   {"kind": "node", "lib": "semaphore", "retry": "1ms"},
    "redis-py":        {"kind": "py", "retry": "default"},
    "redis-py-1ms":    {"kind": "py", "retry": "1ms"},
}
# notice: fair = false (Redisson-style: a release notice, waiters race);
# fair: the default (FIFO handover in the release script, batches of
# batch_ms under contention); cache: + lock caching; fifo: fair with
# batch_ms = 0 (every lock call queues: what batches buy), contended runs only.
DMUTEX_MODES = ["dmutex-notice", "dmutex-fair", "dmutex-cache"]
CONTENDED_ONLY = ["dmutex-fifo"]
PEERS = [s for s in SYSTEMS if s not in DMUTEX_MODES + CONTENDED_ONLY]
PEER_DEFAULTS = [s for s in PEERS if not s.endswith("-1ms")]
# Each mode's keys in a mutex entry; the mode a plain entry is in (the
# default config: see default_mode) gets none of them.
MODE_KEYS = {"notice": " fair = false; cache = false;", "fair": " fair = true; cache = false;",
             "cache": " fair = true; cache = true;", "fifo": " fair = true; cache = false;"}
TOP_KEYS = {"fifo": "batch_ms = 0;\n"}     # a mode's top-level keys
DEFAULT_MODE = None             # set by main from the shim's own table of keys
DEFAULT_SYSTEM = None           # "dmutex-" + DEFAULT_MODE


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def default_mode():
    """The mode of a mutex entry that sets neither `fair` nor `cache`, read
    from the code's own table of keys (`dmutex config-keys mutex`, the
    table config/REFERENCE.md is checked against)."""
    out = subprocess.run([DMUTEX, "config-keys", "mutex"], capture_output=True, text=True,
                         check=True).stdout
    dflt = {}
    for line in out.splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0] in ("fair", "cache"):
            dflt[cells[0]] = cells[2]
    if dflt.get("cache") == "true":
        return "cache"
    if dflt.get("fair") in ("true", "false"):
        return "fair" if dflt["fair"] == "true" else "notice"
    raise RuntimeError("dmutex config-keys mutex: no default for fair/cache in:\n" + out)


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
        flags = "" if mode == DEFAULT_MODE else MODE_KEYS.get(mode, "")
        with open(path, "w") as f:
            f.write('redis = { host = "%s"; port = %d; };\n' % (HOST, self.port))
            if lease_ms:
                f.write("lease_ms = %d;\n" % lease_ms)
            f.write(TOP_KEYS.get(mode, ""))
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

    def commandstats(self, usec=False):
        """INFO commandstats: command -> calls (and, with usec, a second dict
        command -> microseconds the server spent in it)."""
        cs = self.r.info("commandstats")
        calls = {k[len("cmdstat_"):]: v["calls"] for k, v in cs.items()}
        if usec:
            return calls, {k[len("cmdstat_"):]: v["usec"] for k, v in cs.items()}
        return calls

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
            before, before_us = self.commandstats(usec=True)
            start = time.monotonic_ns()
            deadline = start + int(seconds * 1e9)
            for p in procs:
                p.stdin.write("go %d\n" % deadline)
                p.stdin.flush()
            outs = [json.loads(p.stdout.readline()) for p in procs]
            after, after_us = self.commandstats(usec=True)
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
        return self.summarise(system, k, hold_us, start, deadline, outs, before, after,
                              (before_us, after_us))

    def summarise(self, system, k, hold_us, start, deadline, outs, before, after, usec):
        acq = [(a[0], a[1], a[2], i) for i, o in enumerate(outs) for a in o["acq"]]
        waits = [(a[1] - a[0]) / 1e3 for a in acq]
        waits += [(c[1] - c[0]) / 1e3 for o in outs for c in o.get("censored", [])]
        unlocks = [(a[3] - a[2]) / 1e3 for o in outs for a in o["acq"] if len(a) > 3]
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
        hand, hand_wait = [], []
        by_t1 = sorted(acq, key=lambda a: a[1])
        for prev, cur in zip(by_t1, by_t1[1:]):
            if cur[3] != prev[3] and cur[0] < prev[2]:
                hand.append((cur[1] - prev[2]) / 1e3)
                hand_wait.append((prev[2] - cur[0]) / 1e3)
        req = self.requests(system, before, after)
        # Every command the server ran in the window, a script's own calls
        # included (commandstats counts those too): PUBLISH counts notices.
        deltas = {c: n - before.get(c, 0) for c, n in after.items()
                  if n != before.get(c, 0) and c != "info"}
        notices = deltas.get("publish", 0) + deltas.get("spublish", 0)
        evalsha = deltas.get("evalsha", 0)
        evalsha_us = usec[1].get("evalsha", 0) - usec[0].get("evalsha", 0)
        moved = sum(1 for prev, cur in zip(by_t1, by_t1[1:]) if cur[3] != prev[3])
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
            "handoff_asleep_p50_us": median(hand_wait),
            "unlock_p50_us": median(unlocks),
            "requests": req, "req_per_acq": req / len(acq) if acq else float("nan"),
            "commands": deltas,
            "notices_per_acq": notices / len(acq) if acq else float("nan"),
            "evalsha_server_us": evalsha_us / evalsha if evalsha else float("nan"),
            "evalsha_calls": evalsha,
            "moved_frac": moved / (len(acq) - 1) if len(acq) > 1 else float("nan"),
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
        # check the log for "100 mapped now".
        cfg = self.config("passthrough", None, entries)
        # The three kinds run in turn, each round in another order, so that
        # a slow spell of the machine falls on all of them alike. (Pinning
        # the runs to one CPU made plain runs spread less but not bare or
        # shim runs: their ratio did not move.)
        out = {}
        for t in (1, 2):
            kinds = [("plain", None), ("bare", dict(os.environ, LD_PRELOAD=BARE)),
                     ("shim", self.shim_env(cfg, "info"))]
            ns = {k: [] for k, _ in kinds}
            for rep in range(PASS_REPS):
                for kind, env in kinds[rep % 3:] + kinds[:rep % 3]:
                    p = subprocess.run([PASSTHROUGH, str(t), str(PASS_N)], capture_output=True,
                                       text=True, check=True, env=env)
                    if kind == "shim" and "100 mapped now" not in p.stderr:
                        raise RuntimeError("passthrough: the shim did not map the 100 mutexes:\n"
                                           + p.stderr)
                    ns[kind].append(json.loads(p.stdout)["ns_per_pair"])
            plain, bare, shim = median(ns["plain"]), median(ns["bare"]), median(ns["shim"])
            out["t%d" % t] = {"plain_ns": plain, "shim_ns": shim, "bare_ns": bare,
                              "ratio": shim / plain, "bare_ratio": bare / plain,
                              "plain_all": ns["plain"], "shim_all": ns["shim"],
                              "bare_all": ns["bare"]}
            log("  %d thread(s): %.2f ns -> %.2f ns per pair (x%.2f); an interposer that "
                "checks nothing: %.2f ns (x%.2f)"
                % (t, plain, shim, shim / plain, bare, bare / plain))
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
        for name, env in self.instruction_kinds(cfg, rw):
            outf = os.path.join(self.tmp, "callgrind." + name)
            subprocess.run(["valgrind", "--tool=callgrind", "--toggle-collect=" + loop,
                            "--callgrind-out-file=" + outf, PASSTHROUGH, "1",
                            str(CALLGRIND_N)] + extra, capture_output=True, text=True,
                           check=True, env=env)
            with open(outf) as f:
                total = next(int(l.split()[1]) for l in f if l.startswith("summary:"))
            res[name] = total / CALLGRIND_N
        res["extra"] = res["shim"] - res["plain"]
        log("  instructions per %s pair (%s): %.1f -> %.1f (+%.1f)%s"
            % ("rwlock" if rw else "mutex", res["tool"], res["plain"], res["shim"], res["extra"],
               "; an interposer that checks nothing: %.1f" % res["bare"] if "bare" in res else ""))
        return res

    def instruction_kinds(self, cfg, rw):
        """The runs instructions are counted in: plain, bare (mutex pairs
        only: bench/bare.c interposes no rwlock call) and the shim."""
        kinds = [("plain", None)]
        if not rw:
            kinds.append(("bare", dict(os.environ, LD_PRELOAD=BARE)))
        return kinds + [("shim", self.shim_env(cfg))]

    def instructions_perf(self, perf, cfg, extra):
        res = {"tool": "perf stat"}
        for name, env in self.instruction_kinds(cfg, bool(extra)):
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
        sleep (as a lock waiter wakes), a notice's delivery to a blocked
        subscriber after 2 ms (the floor of a handoff), and the same notice
        handed by the subscriber's reading thread to a sleeping second
        thread (as the shim's subscriber thread wakes a lock waiter)."""
        out = {}
        for name, mode, gap in (("ping", "ping", 0), ("ping_idle", "ping", GAP_US),
                                ("notice_idle", "notice", GAP_US),
                                ("notice_thread_idle", "notice_thread", GAP_US)):
            p = subprocess.run([RTT, mode, HOST, str(self.port), str(RTT_N), str(gap)],
                               capture_output=True, text=True, check=True)
            out[name] = json.loads(p.stdout)
        log("round trips: PING %.1f us back to back, %.1f us after 2 ms idle; "
            "notice to a blocked subscriber after 2 ms idle %.1f us, to its second thread "
            "%.1f us (p50)"
            % (out["ping"]["p50_us"], out["ping_idle"]["p50_us"], out["notice_idle"]["p50_us"],
               out["notice_thread_idle"]["p50_us"]))
        return out

    def fig_handoff(self):
        """The handoff targets, each handoff set against a notice floor
        measured right after it: in each of HANDOFF_ROUNDS rounds, a K=2 run
        with a 2 ms hold of dmutex-fair and of dmutex-cache, each followed by
        the notice floor (rtt notice: a PUBLISH to a subscriber blocked for
        2 ms, as issue 11 defines it). A floor taken once, minutes before a
        run, moved a ratio by more than the targets' margins (PING p50
        17.5-78.7 us from one run to the next here). The target is the
        median of the rounds' ratios."""
        log("handoffs, each against the notice floor right after it, %d rounds"
            % HANDOFF_ROUNDS)
        out = {}
        for _ in range(HANDOFF_ROUNDS):
            for system in ("dmutex-fair", "dmutex-cache"):
                r = self.run_cycle(system, 2, GAP_US, RUN_S)
                p = subprocess.run([RTT, "notice", HOST, str(self.port), str(HANDOFF_FLOOR_N),
                                    str(GAP_US)], capture_output=True, text=True, check=True)
                r["floor_us"] = json.loads(p.stdout)["p50_us"]
                r["ratio"] = r["handoff_p50_us"] / r["floor_us"]   # NaN without a handoff
                out.setdefault(system, {"rounds": []})["rounds"].append(r)
                log("  %-13s handoff %.0f us (waiter asleep %.1f ms), notice floor %.0f us: "
                    "x%.2f" % (system, r["handoff_p50_us"], r["handoff_asleep_p50_us"] / 1e3,
                               r["floor_us"], r["ratio"]))
        for o in out.values():
            for key in ("handoff_p50_us", "handoff_asleep_p50_us", "floor_us", "ratio",
                        "unlock_p50_us", "moved_frac", "notices_per_acq", "req_per_acq"):
                o[key] = median([x[key] for x in o["rounds"] if x[key] == x[key]])
        self.res["handoff"] = out

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

    def fig_names(self):
        """Many live names (issue 14's figure, bench/names.c as `make
        bench-names` runs it, without its churn part): lock+unlock of objects
        picked at random among N live ones, each object's heap mutex named
        with dmutex_name(), in PINGs timed just before; RSS per idle name."""
        log("names: lock+unlock among %s live names, RSS per name"
            % " and ".join("{:,}".format(n) for n in NAMES_LIVE))
        path = os.path.join(self.tmp, "names.cfg")
        with open(path, "w") as f:
            f.write('redis = { host = "%s"; port = %d; };\nmutexes = ();\n' % (HOST, self.port))
        p = subprocess.run([NAMES, str(self.port), "live"] + [str(n) for n in NAMES_LIVE],
                           capture_output=True, text=True, check=True, env=self.shim_env(path))
        live = [json.loads(l) for l in p.stdout.splitlines() if l.strip()]
        lo, hi = live[0], live[-1]
        out = {"live": live, "n_lo": lo["names"], "n_hi": hi["names"],
               "ratio": hi["pair_per_ping"] / lo["pair_per_ping"],
               "cpu_ratio": hi["pair_cpu_median_us"] / lo["pair_cpu_median_us"],
               "rss_per_name_b": hi["rss_per_name_b"]}
        for r in live:
            log("  N=%-7d pair %.1f us = %.2f PINGs, cpu %.1f us; RSS %.0f B per name"
                % (r["names"], r["pair_median_us"], r["pair_per_ping"], r["pair_cpu_median_us"],
                   r["rss_per_name_b"]))
        self.res["names"] = out

    def slowlog_pass(self, threshold_us, seconds):
        """The scripts' fixed run (see fig_scripts), each part `seconds`,
        with SLOWLOG logging every command slower than threshold_us while a
        part is measured (not during the workers' warm-up). Returns the
        entries and the EVALSHA calls and microseconds INFO commandstats
        counted meanwhile."""
        old = self.r.config_get("slowlog-*")
        bench, counted = self, [0, 0]       # EVALSHA calls and usec while logging

        class Logging:      # run_cycle's hook: on from "go" to the last report
            def __init__(self):
                self.before = bench.commandstats(usec=True)
                bench.r.config_set("slowlog-log-slower-than", threshold_us)

            def stop(self):
                bench.r.config_set("slowlog-log-slower-than", -1)
                after = bench.commandstats(usec=True)
                for i in (0, 1):
                    counted[i] += after[i].get("evalsha", 0) - self.before[i].get("evalsha", 0)

        self.r.config_set("slowlog-log-slower-than", -1)    # off
        self.r.config_set("slowlog-max-len", SLOWLOG_LEN)
        self.r.slowlog_reset()
        try:
            cfg = self.config("scripts_pairs", DEFAULT_MODE)
            on = Logging()
            subprocess.run([CYCLE, "pairs", HOST, str(self.port), str(seconds), "1"],
                           capture_output=True, text=True, check=True, env=self.shim_env(cfg))
            on.stop()
            for system, k, hold in (("dmutex-fair", 2, GAP_US), ("dmutex-cache", 2, GAP_US),
                                    (DEFAULT_SYSTEM, 4, 0)):
                self.run_cycle(system, k, hold, seconds, monitor=Logging)
        finally:
            self.r.config_set("slowlog-log-slower-than", old["slowlog-log-slower-than"])
        entries = self.r.execute_command("SLOWLOG", "GET", "-1")
        self.r.config_set("slowlog-max-len", old["slowlog-max-len"])
        self.r.slowlog_reset()
        return entries, counted[0], counted[1]

    def fig_scripts(self):
        """The server's time in each script, from SLOWLOG around a fixed run:
        uncontended pairs in the default mode, K=2 with a 2 ms hold in fair
        and in cache mode, K=4 without hold in the default mode. A script is
        known by the SHA1 of its file in shim/lua (the shim sends the files'
        text as they are). Two passes: Redis logs the commands a script runs
        too (client "?:0"), and logging them costs the script time, so the
        scripts' times come from a pass at SLOWLOG_SCRIPTS_US (a script
        takes longer, the commands inside mostly less: the share of EVALSHA
        calls logged is checked against INFO commandstats), and what the
        scripts run from a pass at 0 (every command)."""
        log("scripts: server time per script (SLOWLOG around a fixed run, at %d us and at 0)"
            % SLOWLOG_SCRIPTS_US)
        sha_name = {}
        for f in sorted(glob.glob(os.path.join(LUA_DIR, "*.lua"))):
            with open(f, "rb") as fh:
                sha_name[hashlib.sha1(fh.read()).hexdigest()] = os.path.basename(f)

        def split(entries):
            top, inner = {}, {}
            for e in entries:
                args = [a.decode(errors="replace") if isinstance(a, bytes) else str(a)
                        for a in e[3]]
                cmd = args[0].lower() if args else "?"
                client = e[4].decode(errors="replace") if len(e) > 4 and \
                    isinstance(e[4], bytes) else ""
                if client == "?:0":             # run by a script
                    inner.setdefault(cmd, []).append(int(e[2]))
                    continue
                if cmd in ("info", "config", "slowlog"):
                    continue                    # the driver's own
                if cmd in ("evalsha", "eval") and len(args) > 1:
                    sha = args[1] if cmd == "evalsha" else \
                        hashlib.sha1(args[1].encode()).hexdigest()
                    cmd = sha_name.get(sha.lower(), "script " + sha[:12])
                top.setdefault(cmd, []).append(int(e[2]))
            return top, inner

        entries, calls, usec = self.slowlog_pass(SLOWLOG_SCRIPTS_US, SCRIPTS_RUN_S)
        top, _ = split(entries)
        logged = sum(len(d) for c, d in top.items() if c.endswith(".lua") or
                     c.startswith("script "))
        out = {"threshold_us": SLOWLOG_SCRIPTS_US, "by": {}, "inner": {},
               "full": len(entries) >= SLOWLOG_LEN,
               "evalsha_calls": calls, "evalsha_logged": logged,
               "evalsha_mean_us": usec / calls if calls else float("nan")}
        for cmd, d in top.items():
            out["by"][cmd] = {"calls": len(d), "p50_us": pct(d, 50), "p99_us": pct(d, 99),
                              "mean_us": sum(d) / len(d), "max_us": max(d)}
        entries0, calls0, usec0 = self.slowlog_pass(0, SCRIPTS_ALL_RUN_S)
        top0, inner = split(entries0)
        out["full"] = out["full"] or len(entries0) >= SLOWLOG_LEN
        out["all_evalsha_mean_us"] = usec0 / calls0 if calls0 else float("nan")
        out["all_by"] = {c: sum(d) / len(d) for c, d in top0.items()}
        for cmd, d in inner.items():
            out["inner"][cmd] = {"calls": len(d), "mean_us": sum(d) / len(d),
                                 "total_ms": sum(d) / 1e3}
        for cmd, v in sorted(out["by"].items(), key=lambda x: -x[1]["calls"]):
            log("  %-12s %6d calls  p50 %3d us  mean %5.1f us  p99 %4d us"
                % (cmd, v["calls"], v["p50_us"], v["mean_us"], v["p99_us"]))
        log("  EVALSHA: %d of %d calls logged at %d us; mean %.1f us (commandstats), %.1f us "
            "with every command logged" % (logged, calls, SLOWLOG_SCRIPTS_US,
                                          out["evalsha_mean_us"], out["all_evalsha_mean_us"]))
        log("  inside the scripts: %s" % ", ".join(
            "%s %d x %.1f us" % (c, v["calls"], v["mean_us"])
            for c, v in sorted(out["inner"].items(), key=lambda x: -x[1]["total_ms"])))
        if out["full"]:
            log("  warning: SLOWLOG held only the last %d commands" % SLOWLOG_LEN)
        self.res["scripts"] = out

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
        # The 2 ms-hold target takes the median of HOLD_ROUNDS runs of the
        # default mode at each K (the sweep's and these), as the handoff
        # targets take the median of their rounds: one 2 s run can land on
        # a slow moment of a shared machine, and the worst K picks it.
        extra = []
        for rep in range(HOLD_ROUNDS - 1):
            for k in KS[1:]:
                r = self.run_cycle(DEFAULT_SYSTEM, k, GAP_US, RUN_S)
                extra.append(r)
                log("  hold %4d us K=%2d %-13s %8.0f acq/s  handoff %.0f us  (round %d of the "
                    "2 ms-hold target)" % (GAP_US, k, DEFAULT_SYSTEM, r["throughput"],
                                           r["handoff_p50_us"], rep + 2))
        self.res["hold_rounds"] = extra


# ---- report -------------------------------------------------------------------

def find(runs, system, k, hold):
    for r in runs:
        if r["system"] == system and r["k"] == k and r["hold_us"] == hold:
            return r
    return None


def verdict(value, target, higher_is_better, digits=2):
    """met, or MISSED by how much (relative to the target). `value` is
    compared as the table prints it, rounded to `digits`."""
    if value != value:      # NaN
        return "no data"
    v = round(value, digits)
    ok = v >= target if higher_is_better else v <= target
    if ok:
        return "met"
    if higher_is_better:
        return "MISSED by %.0f%%" % (100 * (target - value) / target)
    return "MISSED by %.0f%%" % (100 * (value - target) / target)


def best_peer(runs, k, hold):
    """The peer variant (of all six) with the highest throughput at K."""
    cands = [r for r in (find(runs, p, k, hold) for p in PEERS) if r]
    return max(cands, key=lambda r: r["throughput"]) if cands else None


def script_us(res, name):
    """The server's mean time in one script or command (SLOWLOG, whole
    microseconds per call: the mean keeps the fraction), NaN if not seen."""
    return res.get("scripts", {}).get("by", {}).get(name, {}).get("mean_us", float("nan"))


def per_acq_commands(r):
    """The top-level commands of a run per acquisition, as text."""
    n = r["acquisitions"] or 1
    cmds = sorted((c, v) for c, v in r["commands"].items()
                  if c.split("|")[0] in TOP_LEVEL and v > 0)
    return ", ".join("%s %.2f" % (c.upper(), v / n) for c, v in cmds) or "none"


def targets(res):
    """The targets of issue 11, in its order: (figure, measured, target,
    verdict, cause). The cause is a measured fact, printed for a miss."""
    rows = []
    runs, rt = res["sweep"], res["rtt"]
    rtt = res["rtt_us"]
    d = DEFAULT_SYSTEM
    acq_us, rel_us = script_us(res, "acquire.lua"), script_us(res, "release.lua")
    ping_srv = res["scripts"]["all_by"].get("ping", float("nan"))

    u = res["uncontended"][d]
    k1 = find(runs, d, 1, 0)
    rows.append(("uncontended mapped lock+unlock / PING RTT (default config: %s)" % d,
                 "%.1f / %.1f us = x%.2f" % (u["pair_us"], u["ping_us"], u["ratio"]),
                 "<= x1.5", verdict(u["ratio"], 1.5, False),
                 "at K=1 (no hold) lock returns after %.1f us and unlock after %.1f us (p50), "
                 "against a PING of %.1f us here, with %.2f requests per acquisition (%s); "
                 "in the server EVALSHA takes %.1f us per call (INFO commandstats, K=1 run): "
                 "acquire.lua %.1f us, release.lua %.1f us (SLOWLOG means), a PING %.1f us"
                 % (k1["wait_p50_us"], k1.get("unlock_p50_us", float("nan")), u["ping_us"],
                    k1["req_per_acq"], per_acq_commands(k1), k1["evalsha_server_us"], acq_us,
                    rel_us, ping_srv)))

    ho = res["handoff"]

    def rounds(o):
        return "; rounds (handoff / floor): " + ", ".join(
            "%.0f / %.0f us = x%.2f" % (x["handoff_p50_us"], x["floor_us"], x["ratio"])
            for x in o["rounds"])

    def last(o):
        return o["rounds"][-1]

    def measured(o):
        return ("x%.2f, the median of %d rounds' ratios (handoff p50 %.0f us, notice floor "
                "%.0f us: their medians)"
                % (o["ratio"], len(o["rounds"]), o["handoff_p50_us"], o["floor_us"]))

    f = ho["dmutex-fair"]
    rows.append(("fair handoff (K=2, 2 ms hold) / notice floor (PUBLISH to a sleeping "
                 "subscriber)",
                 measured(f),
                 "<= x1.5", verdict(f["ratio"], 1.5, False),
                 "the waiter sleeps %.1f ms before its handover (the lock moved in %.0f%% of "
                 "the acquisitions: a batch does not go on after a 2 ms section, "
                 "batch_hold_us), the floor's subscriber 2 ms; "
                 "the holder's unlock (release.lua, %.1f us in the server: SLOWLOG mean) "
                 "returns %.0f us after its call (p50); per acquisition %.2f PUBLISH (a "
                 "script's included) and %.2f requests (%s); the waiter reads its handover on "
                 "a connection of its own (one wake-up, as the floor's subscriber)%s"
                 % (f["handoff_asleep_p50_us"] / 1e3, 100 * f["moved_frac"], rel_us,
                    f["unlock_p50_us"], f["notices_per_acq"], f["req_per_acq"],
                    per_acq_commands(last(f)), rounds(f))))

    c = ho["dmutex-cache"]
    rows.append(("cache mode: second process gets the lock after the holder's CS ends / "
                 "notice floor",
                 measured(c),
                 "<= x2.0", verdict(c["ratio"], 2.0, False),
                 "the waiter sleeps %.1f ms; its want notice reaches the holder during its "
                 "critical section, the handover is a second notice: %.2f PUBLISH (a script's "
                 "included) and %.2f requests (%s) per acquisition; the holder's unlock returns "
                 "%.0f us after its call (p50; release.lua %.1f us in the server); the waiter "
                 "reads its handover on a connection of its own (one wake-up)%s"
                 % (c["handoff_asleep_p50_us"] / 1e3, c["notices_per_acq"], c["req_per_acq"],
                    per_acq_commands(last(c)), c["unlock_p50_us"], rel_us, rounds(c))))

    per_k = []
    for k in PEER_KS:
        r, bp = find(runs, d, k, 0), best_peer(runs, k, 0)
        if r and bp:
            per_k.append((r["throughput"] / bp["throughput"], k, r, bp))
    if per_k:
        worst = min(per_k, key=lambda x: x[0])
        ratio, wk, r, bp = worst
        rows.append(("lock+INCR+unlock throughput, K = %s, default mode / best peer at that K"
                     % ", ".join(str(k) for k in PEER_KS),
                     "worst K=%d: %.0f / %.0f (%s) = x%.2f; %s"
                     % (wk, r["throughput"], bp["throughput"], bp["system"], ratio,
                        ", ".join("K=%d x%.2f" % (k, x) for x, k, _, _ in per_k)),
                     ">= x1.5 at every K", verdict(ratio, 1.5, True),
                     "at K=%d the best peer, %s, gives the lock to another process in %.1f%% "
                     "of its acquisitions (%d of %d processes starved, longest wait %s); "
                     "dmutex in %.1f%% (%d starved, longest wait %s), each such move a "
                     "handoff of %.0f us (p50) in a cycle of %.0f us (1 / throughput)"
                     % (wk, bp["system"], 100 * bp["moved_frac"], bp["starved"], wk,
                        fmt_us(bp["wait_max_us"]), 100 * r["moved_frac"], r["starved"],
                        fmt_us(r["wait_max_us"]), r["handoff_p50_us"], 1e6 / r["throughput"])))

    mine = [r for r in runs if r["system"] == d]
    w = max(mine, key=lambda r: r["req_per_acq"])
    rows.append(("requests per acquisition, default mode, every K",
                 "worst %.2f (K=%d, hold %d ms)" % (w["req_per_acq"], w["k"],
                                                   w["hold_us"] // 1000),
                 "<= 2.0", verdict(w["req_per_acq"], 2.0, False),
                 "at K=%d, hold %d ms, per acquisition: %s"
                 % (w["k"], w["hold_us"] // 1000, per_acq_commands(w))))

    # Per K: each run's throughput against its own limit (its measured
    # hold), the median of the rounds; the run shown is the median one.
    worst = None
    for k in KS[1:]:
        rs = [x for x in [find(runs, d, k, GAP_US)] + res.get("hold_rounds", [])
              if x and x["system"] == d and x["k"] == k and x["hold_us"] == GAP_US]
        if not rs:
            continue
        fr = sorted((x["throughput"] * (x["hold_us_measured"] + rtt) / 1e6, i)
                    for i, x in enumerate(rs))
        frac, i = fr[len(fr) // 2]
        if worst is None or frac < worst[0]:
            worst = (frac, k, rs[i], 1e6 / (rs[i]["hold_us_measured"] + rtt), [f for f, _ in fr])
    frac, wk, r, limit, all_fr = worst
    rows.append(("2 ms hold, worst K: throughput / 1/(hold + RTT) limit (%s)" % d,
                 "K=%d: %.0f / %.0f acq/s = %.0f%%%s"
                 % (wk, r["throughput"], limit, 100 * frac,
                    ", the median of %d runs (%s)" % (len(all_fr), ", ".join(
                        "%.0f%%" % (100 * f) for f in all_fr)) if len(all_fr) > 1 else ""),
                 ">= 95%", verdict(100 * frac, 95, True, 0),
                 "at K=%d an acquisition costs the hold, %.0f us, and %.0f%% of them move the "
                 "lock to another process (the rest join a batch), each such move a handoff "
                 "of %.0f us (p50; the holder's unlock returns after %.0f us), where the limit "
                 "allows one RTT, %.0f us, per acquisition: hold + moves x handoff = %.0f us, "
                 "%.0f acq/s at most; measured %.0f us per acquisition (%.2f requests per "
                 "acquisition)"
                 % (wk, r["hold_us_measured"], 100 * r["moved_frac"], r["handoff_p50_us"],
                    r.get("unlock_p50_us", float("nan")), rtt,
                    r["hold_us_measured"] + r["moved_frac"] * r["handoff_p50_us"],
                    1e6 / (r["hold_us_measured"] + r["moved_frac"] * r["handoff_p50_us"]),
                    1e6 / r["throughput"], r["req_per_acq"])))

    nm = res.get("names")
    if nm:
        v1 = verdict(nm["ratio"], 1.2, False)
        v2 = verdict(nm["rss_per_name_b"], 1024, False, 0)
        lo, hi = nm["live"][0], nm["live"][-1]
        rows.append(("lock+unlock cost with {:,} distinct live names / with {:,}; RSS per idle "
                     "name".format(nm["n_hi"], nm["n_lo"]),
                     "%.2f / %.2f PINGs = x%.2f; %.0f B per name"
                     % (hi["pair_per_ping"], lo["pair_per_ping"], nm["ratio"],
                        nm["rss_per_name_b"]),
                     "<= x1.2, RSS per idle name <= 1 KB",
                     "met" if v1 == v2 == "met" else
                     "; ".join("%s%s" % (what, v) for what, v in (("cost: ", v1), ("RSS: ", v2))
                               if v != "met"),
                     "the pair's CPU in the locking thread: %.1f us with %d names, %.1f us "
                     "with %d (x%.2f); RSS per name with %d names: %.0f B while they live, "
                     "%.0f B still kept once every mutex is destroyed and its object freed"
                     % (hi["pair_cpu_median_us"], hi["names"], lo["pair_cpu_median_us"],
                        lo["names"], nm["cpu_ratio"], hi["names"], nm["rss_per_name_b"],
                        hi["rss_kept_after_destroy_per_name_b"])))

    pt = res["passthrough"]
    x, ins = pt["t1"], pt["instructions"]
    rows.append(("unmapped lock+unlock, shim / none",
                 "%.2f / %.2f ns = x%.2f" % (x["shim_ns"], x["plain_ns"], x["ratio"]),
                 "<= x1.15", verdict(x["ratio"], 1.15, False),
                 "%s: %.1f instructions per pair without the shim, %.1f with it (+%.1f); an "
                 "interposer that checks nothing (bench/bare.c): %.1f instructions, %.2f ns "
                 "= x%.2f; runs of %s (ns per pair, without), %s (bare) and %s (with)"
                 % (ins["tool"], ins["plain"], ins["shim"], ins["extra"], ins["bare"],
                    x["bare_ns"], x["bare_ratio"],
                    ", ".join("%.2f" % v for v in x["plain_all"]),
                    ", ".join("%.2f" % v for v in x["bare_all"]),
                    ", ".join("%.2f" % v for v in x["shim_all"]))))
    return rows


def misses(rows):
    """The missed targets: size and cause, one line each."""
    return ["%s: %s (%s against %s). Cause: %s." % (r[0], r[3], r[1], r[2], r[4])
            for r in rows if r[3].startswith("MISSED") or "MISSED" in r[3]]


def condwake_line(res):
    cw, floor = res["condwake"], res["rtt"]["notice_idle"]["p50_us"]
    return ("condition variable wake-up between two processes (a mapped mutex, a listed "
            "cond; pthread_cond_signal in A -> pthread_cond_wait returned in B, after 2 ms "
            "asleep): p50 %.0f us = x%.2f the notice floor, p99 %.0f us = x%.2f"
            % (cw["p50_us"], cw["p50_us"] / floor, cw["p99_us"], cw["p99_us"] / floor))


def context(res):
    """Lines that help read the targets: handoffs against the round trips,
    the unmapped pair with 2 threads, the condition variable."""
    rt = res["rtt"]
    out = [condwake_line(res)]
    for s in ("dmutex-fair", "dmutex-cache"):
        h = res["handoff"][s]["handoff_p50_us"]
        out.append("%s handoff (K=2, 2 ms hold; the median of the handoff rounds): %.0f us = "
                   "x%.2f the back-to-back PING, x%.2f the PING after 2 ms idle (both taken "
                   "before the sweep)"
                   % (s, h, h / rt["ping"]["p50_us"], h / rt["ping_idle"]["p50_us"]))
    x = res["passthrough"]["t2"]
    ins = res["passthrough"]["instructions"]
    out.append("unmapped lock+unlock, 2 threads: %.2f / %.2f ns = x%.2f; instructions per "
               "pair (%s, 1 thread): %.1f without the shim, %.1f with it (+%.1f)"
               % (x["shim_ns"], x["plain_ns"], x["ratio"], ins["tool"], ins["plain"],
                  ins["shim"], ins["extra"]))
    rw = res["passthrough"].get("rw_instructions")     # when the run measured rwlocks
    if rw:
        out.append("unlisted rwlock rdlock+unlock: instructions per pair (%s): %.1f without "
                   "the shim, %.1f with it (+%.1f)"
                   % (rw["tool"], rw["plain"], rw["shim"], rw["extra"]))
    c = res["uncontended"].get("dmutex-cache", {})
    if "pairs_per_s" in c:
        out.append("lock caching, one process, untimed pairs: %.0f pairs/s" % c["pairs_per_s"])
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
        cells = [s + (" (default config)" if s == DEFAULT_SYSTEM else
                      " (batch_ms = 0)" if s == "dmutex-fifo" else "")]
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
              "dmutex-fifo": "lw 2 dt 2 lc rgb '#2a9d3a' pt 5",
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


def run_line(res):
    """What ran where: the machine, the server, the shim's commit."""
    m = res["machine"]
    return ("`make bench`%s on %s: %d cores (`nproc`), %s, Linux %s, redis-server %s (one "
            "private server for every figure), node %s, python %s with redis-py %s; load "
            "average at the end %s. Shim built at commit %s."
            % (" with BENCH_QUICK=1" if QUICK else "", m["date"], m["nproc"], m["cpu"],
               m["kernel"], m["redis"], m["node"], m["python"], m["redis_py"],
               " ".join(m["load"]), res["shim_commit"]))


def rtt_line(res):
    rt = res["rtt"]
    return ("Round trip (C hiredis client, p50): PING %.1f us back to back (the RTT of "
            "every ratio), %.1f us after 2 ms idle; a PUBLISH reaching a subscriber "
            "blocked for 2 ms: %.1f us (the notice floor: the floor of a notice handoff on "
            "this machine; the handoff targets take it again right after each of their "
            "runs), %.1f us when the subscriber's reading thread then wakes a "
            "second, sleeping thread."
            % (rt["ping"]["p50_us"], rt["ping_idle"]["p50_us"], rt["notice_idle"]["p50_us"],
               rt["notice_thread_idle"]["p50_us"]))


def is_script(cmd):
    return cmd.endswith(".lua") or cmd.startswith("script ")


def scripts_table(res):
    sc = res["scripts"]
    rows = [[cmd, str(v["calls"]), "%d" % v["p50_us"], "%.1f" % v["mean_us"], "%d" % v["p99_us"],
             "%d" % v["max_us"], "%.1f" % sc["all_by"].get(cmd, float("nan"))]
            for cmd, v in sorted(sc["by"].items(), key=lambda x: -x[1]["calls"])
            if is_script(cmd)]
    return table(rows, ["script", "calls logged", "p50 us", "mean us", "p99 us", "max us",
                        "mean us, every command logged"])


def inner_table(res):
    rows = [[cmd, str(v["calls"]), "%.1f" % v["mean_us"], "%.1f" % v["total_ms"]]
            for cmd, v in sorted(res["scripts"]["inner"].items(), key=lambda x: -x[1]["total_ms"])]
    return table(rows, ["command run by a script", "calls", "mean us", "total ms"])


def evalsha_sweep_us(res):
    """INFO commandstats' mean EVALSHA time over the default mode's sweep runs
    (SLOWLOG off): every script of the default mode together."""
    runs = [r for r in res["sweep"] if r["system"] == DEFAULT_SYSTEM and r["evalsha_calls"]]
    calls = sum(r["evalsha_calls"] for r in runs)
    return sum(r["evalsha_server_us"] * r["evalsha_calls"] for r in runs) / calls \
        if calls else float("nan")


def names_table(res):
    rows = [["{:,}".format(r["names"]), "%.1f us" % r["pair_median_us"],
             "%.1f us" % r["ping_median_us"], "%.2f" % r["pair_per_ping"],
             "%.1f us" % r["pair_cpu_median_us"], "%.0f B" % r["rss_per_name_b"],
             "%.2f s" % r["map_s"]] for r in res["names"]["live"]]
    return table(rows, ["live names", "pair (p50)", "PING before it (p50)", "pair in PINGs",
                        "pair CPU (p50)", "RSS per name", "naming them all"])


# README's short names of the figures (the full ones are results.md's), by
# how each full name starts.
README_NAMES = (("uncontended", "uncontended lock+unlock / PING RTT"),
                ("fair handoff", "fair handoff / notice floor"),
                ("cache mode", "cache-mode handoff / notice floor"),
                ("lock+INCR+unlock", "throughput vs the best peer, K = 4..32"),
                ("requests per acquisition", "requests per acquisition"),
                ("2 ms hold", "2 ms hold: throughput / 1/(hold + RTT)"),
                ("lock+unlock cost", "100,000 live names / 10; RSS per idle name"),
                ("unmapped", "unmapped lock+unlock, shim / none"))


def readme_row(r):
    """A target's row as README shows it: the short name, the figure
    without the rounds or the other K, the target."""
    name = next((short for start, short in README_NAMES if r[0].startswith(start)), r[0])
    measured = r[1].split(", the median")[0].split("; K=")[0]
    return (name, measured, r[2])


def update_readme(section):
    """README.md's Performance section is this run's: the text between its
    markers is replaced (the section is added before "## Where things are"
    when the README has none)."""
    begin = "<!-- bench/driver.py writes from here to the end marker: run make bench -->"
    end = "<!-- end of what bench/driver.py writes -->"
    with open(README) as f:
        text = f.read()
    block = begin + "\n" + section + "\n" + end
    if begin in text and end in text:
        text = text[:text.index(begin)] + block + text[text.index(end) + len(end):]
    else:
        head = "## Performance\n\n" + block + "\n\n"
        at = text.find("## Where things are")
        text = text[:at] + head + text[at:] if at >= 0 else text.rstrip("\n") + "\n\n" + head
    with open(README, "w") as f:
        f.write(text)


def report(res, out_dir, tmp):
    rows = targets(res)
    tgt = table([r[:4] for r in rows], ["figure", "measured (median)", "target", "verdict"])
    miss = misses(rows)
    met = "%d of %d targets met." % (len(rows) - len(miss), len(rows))
    miss_md = (["Missed, with the size of each miss and its cause (measured in this run):", ""]
               + ["- " + x for x in miss] if miss else ["Every target is met."])
    print()
    print(run_line(res))
    print(rtt_line(res) + "\n")
    print(tgt)
    print("\n" + met)
    print("\n".join(miss_md))
    ctx = context(res)
    print("\n".join(ctx))
    md = ["# dmutex benchmark results", "",
          "Generated by " + run_line(res), "",
          rtt_line(res), "",
          "Contended runs: %.1f s each, one run per point of the tables (the 2 ms-hold target "
          "takes %d runs of the default mode per K, their median); throughput is the median "
          "over %d slices of the run, waits and handoffs the p50/p99/max over all its "
          "acquisitions. "
          "A handoff is timed from the holder's call of unlock to the return of lock in the "
          "process that was waiting. The default config (a mutex entry with neither `fair` "
          "nor `cache`) is %s." % (RUN_S, HOLD_ROUNDS, WINDOWS, DEFAULT_SYSTEM),
          "", "## Targets (issue 11)", "", tgt, "", met, ""] + miss_md + [""]
    md += ["- " + c for c in ctx] + [""]
    # README is the front door: a short table of the targets, the rest here.
    m = res["machine"]
    update_readme("\n".join([
        "The last `make bench`%s (%s, %d cores, redis-server %s, shim at %s) met %d of %d "
        "targets. Every figure, its conditions and the peers:\n"
        "[bench/results.md](bench/results.md); how each is measured:\n"
        "[bench/README.md](bench/README.md)."
        % (" with BENCH_QUICK=1" if QUICK else "", m["date"], m["nproc"], m["redis"],
           res["shim_commit"], len(rows) - len(miss), len(rows)),
        "", "| figure | measured | target |", "|---|---|---|"]
        + ["| %s | %s | %s |" % readme_row(r) for r in rows]))
    for hold in HOLDS_US:
        md += ["## K processes, %s" % ("no hold" if hold == 0 else "%d ms hold" % (hold // 1000)),
               "", "Each cell: throughput (acquisitions/s) / p99 wait / longest wait / client "
               "requests per acquisition; `(n starved)`: n processes never got the lock "
               "within the run.", "",
               sweep_table(res["sweep"], hold), ""]
    sc = res["scripts"]
    md += ["## Server time per script", "",
           "SLOWLOG around a fixed run (uncontended pairs in the default mode; K=2 with a "
           "2 ms hold in fair and in cache mode and K=4 without hold in the default mode; "
           "%.1f s each, logging from the workers' start signal on), and again (%.1f s each) "
           "at a threshold of 0. At a threshold of %d us, which "
           "logs the scripts (%d of the %d EVALSHA calls INFO commandstats counted) but few "
           "of the commands they run: each script's time in the server, the commands it runs "
           "included. EVALSHA's mean in that pass: %.1f us (commandstats); in the default "
           "mode's K runs above, with SLOWLOG off: %.1f us. At a threshold of 0 Redis also "
           "logs every command a script runs (as client `?:0`), which costs the script time "
           "(EVALSHA's mean: %.1f us): the last column, and the second table. For "
           "comparison, a PING: %.1f us, the workers' INCR: %.1f us (means, every command "
           "logged).%s"
           % (SCRIPTS_RUN_S, SCRIPTS_ALL_RUN_S, sc["threshold_us"], sc["evalsha_logged"],
              sc["evalsha_calls"], sc["evalsha_mean_us"], evalsha_sweep_us(res),
              sc["all_evalsha_mean_us"], sc["all_by"].get("ping", float("nan")),
              sc["all_by"].get("incr", float("nan")),
              " (The log was full: only the last %d commands.)" % SLOWLOG_LEN
              if sc["full"] else ""), "", scripts_table(res), "", inner_table(res), ""]
    if res.get("names"):
        md += ["## Many live names", "",
               "`bench/names.c` (as `make bench-names` runs it, without the churn): each "
               "object's heap mutex named with `dmutex_name()`, lock+unlock of objects picked "
               "at random among the live ones, each pair after a timed PING on the program's "
               "own connection; RSS the names add, per name.", "", names_table(res), ""]
    md += ["## Top-level commands each system sends (learnt under MONITOR)", ""]
    for s, cmds in res.get("toplevel_commands", {}).items():
        md.append("- %s: %s" % (s, ", ".join(cmds)))
    cw, rt = res["condwake"], res["rtt"]
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
    log("wrote bench/results.md, bench/throughput.png and README.md's Performance section")


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
    global DEFAULT_MODE, DEFAULT_SYSTEM
    port = int(os.environ["REDIS_TMP_PORT"])
    DEFAULT_MODE = default_mode()
    DEFAULT_SYSTEM = "dmutex-" + DEFAULT_MODE
    b = Bench(port)
    b.res["shim_commit"] = snapshot_shim(b.tmp)
    b.res["default_system"] = DEFAULT_SYSTEM
    log("default config: %s (dmutex config-keys mutex)" % DEFAULT_SYSTEM)
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
        b.fig_handoff()
        b.fig_condwake()
        b.fig_scripts()
        b.fig_names()         # last: its 100,000 names leave their token keys in the server
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
