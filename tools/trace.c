/* dmutex trace: runs a program with libdmutex-trace.so preloaded (no
 * Redis, nothing mapped) and lets that library report every mutex the
 * program locked, identified as a config entry names it (symbol, offset
 * or index, init_site, or for a stripped binary an address of this
 * build), sorted by contention, with a ready `mutexes = ( ... );` block;
 * and the condition variables and rwlocks it used, with `conds` and
 * `rwlocks` blocks.
 * This file only sets the environment the library reads and replaces
 * itself with the program: the report is written inside the traced
 * process (shim/trace/), where the addresses mean something. */
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "dmutex.h"

#define TRACE_LIB "libdmutex-trace.so"
#define TRACE_INTERVAL_MAX 86400
#define TRACE_TOP_DEFAULT 10

static const char trace_usage[] =
    "usage: dmutex trace [-o FILE.json] [-i SECONDS] [--top N] [--min-locks N] [--] PROGRAM [ARGS...]\n"
    "\n"
    "Runs PROGRAM with " TRACE_LIB " preloaded: no Redis, no config, nothing\n"
    "mapped; every pthread mutex call passes through to glibc and is counted.\n"
    "At exit (and on SIGUSR1, when PROGRAM leaves that signal alone, and every\n"
    "SECONDS with -i, from its first unlock on: the reporter thread starts\n"
    "there) each process prints on stderr every mutex it locked,\n"
    "sorted by contention: how sure the identification is, locks, contended\n"
    "locks, total and longest wait, longest and 99th percentile hold, threads,\n"
    "and the identification, the way a config entry names it:\n"
    "\n"
    "  symbol      a global or file-static variable (from .symtab, else .dynsym),\n"
    "              with the offset or index of the mutex inside it: sure\n"
    "  init_site   a heap mutex: the function that called pthread_mutex_init\n"
    "              (its mutexes are one row): sure; in a library dlopen loads,\n"
    "              shown commented out (init sites are resolved at start)\n"
    "  address     a stripped binary with no symbol for it: its address (or its\n"
    "              init call's) in the object, with the object's build-id:\n"
    "              weak, the address of this build only\n"
    "  unknown     a stack mutex, or a heap one never given to pthread_mutex_init\n"
    "\n"
    "Then a `mutexes = ( ... );` block for the first rows, each line commented\n"
    "with its certainty and counts, names valid for dmutex: paste it into a\n"
    "config and keep the mutexes that guard state other machines share.\n"
    "\n"
    "Condition variables and rwlocks are recorded too: each process that used\n"
    "any prints, after its mutexes, a table of its condition variables (waits,\n"
    "signals, broadcasts, total and longest time in a wait, threads) with a\n"
    "`conds = ( ... );` block, and one of its rwlocks (read and write locks,\n"
    "contended ones, their total and longest wait, threads) with an\n"
    "`rwlocks = ( ... );` block, identified the same way (init_site: the\n"
    "function that called pthread_cond_init or pthread_rwlock_init).\n"
    "A fork child reports on its own: its pid in the header, which says whose\n"
    "fork child it is (its counts start at the fork), one line when it locked\n"
    "nothing since. A program PROGRAM runs (the preload is inherited) reports\n"
    "too, unless it locked nothing (no mutex, rwlock or condition variable),\n"
    "and so do its fork children: their stderr may be what PROGRAM reads.\n"
    "With -o the JSON of a fork child has \"fork_child_of\". A process that ends\n"
    "by _exit or a signal writes no exit report (send SIGUSR1 first, or use\n"
    "-i); one whose stderr is no longer the file it started with (closed,\n"
    "another file on fd 2) writes no text report (-o still writes the JSON).\n"
    "Threads are told apart up to 64 per mutex. `dmutex scan` reads a binary\n"
    "without running it; trace sees what a run really locks.\n"
    "\n"
    "  -o, --output FILE     write the report as JSON too: FILE for PROGRAM,\n"
    "                        FILE.PID.json (FILE without .json) for other processes\n"
    "  -i, --interval SECONDS\n"
    "                        report every SECONDS (1..86400) as well\n"
    "      --top N           config entries for at most the first N rows (default 10)\n"
    "      --min-locks N     and only for rows with at least N locks (default 1;\n"
    "                        for conds: waits + signals + broadcasts, rwlocks: reads\n"
    "                        + writes); --top applies to each block\n"
    "  -h, --help            this text\n"
    "\n"
    "Exit status: PROGRAM's; 2 for a usage error (or an -o FILE that cannot be\n"
    "written: said before PROGRAM starts); 127 if PROGRAM cannot be run, or\n"
    "cannot be traced (statically linked, 32-bit, set-user-ID, set-group-ID or\n"
    "with file capabilities: the loader would not preload the library).\n";

/* -o FILE: its directory must take a new file (the library writes
 * FILE.tmpPID there and renames it), and FILE must not be a directory:
 * said now, not at the program's exit. 0, or -1 with a message. */
static int output_ok(const char *file)
{
    struct stat st;
    if (stat(file, &st) == 0 && S_ISDIR(st.st_mode)) {
        fprintf(stderr, "dmutex trace: -o %s: %s\n", file, strerror(EISDIR));
        return -1;
    }
    char copy[PATH_MAX];
    snprintf(copy, sizeof copy, "%s", file);
    const char *dir = dirname(copy);
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || access(dir, W_OK | X_OK) != 0) {
        int e = errno;
        if (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode))
            e = ENOTDIR;
        fprintf(stderr, "dmutex trace: -o %s: cannot write in %s: %s\n", file, dir, strerror(e));
        return -1;
    }
    return 0;
}

static int count_arg(const char *opt, const char *v, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno || end == v || *end || n < lo || n > hi) {
        fprintf(stderr, "dmutex trace: %s %s: not a number in %ld..%ld\n", opt, v, lo, hi);
        return -1;
    }
    *out = n;
    return 0;
}

int dm_cli_trace(int argc, char **argv)
{
    enum { OPT_TOP = 256, OPT_MIN_LOCKS };
    static const struct option opts[] = {
        { "output", required_argument, NULL, 'o' },
        { "interval", required_argument, NULL, 'i' },
        { "top", required_argument, NULL, OPT_TOP },
        { "min-locks", required_argument, NULL, OPT_MIN_LOCKS },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *out = NULL;
    long interval = 0, top = TRACE_TOP_DEFAULT, min_locks = 1;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "+o:i:h", opts, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case 'i':
            if (count_arg("-i", optarg, 1, TRACE_INTERVAL_MAX, &interval) != 0)
                return 2;
            break;
        case OPT_TOP:
            if (count_arg("--top", optarg, 0, LONG_MAX, &top) != 0)
                return 2;
            break;
        case OPT_MIN_LOCKS:
            if (count_arg("--min-locks", optarg, 0, LONG_MAX, &min_locks) != 0)
                return 2;
            break;
        case 'h': fputs(trace_usage, stdout); return 0;
        default: fputs(trace_usage, stderr); return 2;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "dmutex trace: no PROGRAM given\n\n%s", trace_usage);
        return 2;
    }
    char lib[PATH_MAX], why[PATH_MAX + 200];
    /* beside this executable, else where `make install` put it */
    if (dm_cli_find_lib("trace", "DMUTEX_TRACE_LIB", TRACE_LIB,
                        DM_TRACEDIR_FROM_BINDIR "/" TRACE_LIB, "its path", lib, sizeof lib) != 0)
        return 127;
    /* A program the preload does not reach would run untraced and report
     * nothing: say why instead. */
    if (dm_cli_preload_reaches(argv[optind], TRACE_LIB, "traced", why, sizeof why) == 0) {
        fprintf(stderr, "dmutex trace: %s\n", why);
        return 127;
    }

    char num[32];
    if (out) {
        /* Absolute: the program may change directory before it exits. */
        char cwd[PATH_MAX], *abs = NULL;
        if (out[0] != '/' && getcwd(cwd, sizeof cwd)) {
            if (asprintf(&abs, "%s/%s", cwd, out) < 0)
                return 127;
        }
        int ok = output_ok(abs ? abs : out);
        if (ok == 0)
            setenv("DMUTEX_TRACE_JSON", abs ? abs : out, 1);
        free(abs);
        if (ok != 0)
            return 2;
    } else {
        unsetenv("DMUTEX_TRACE_JSON");
    }
    snprintf(num, sizeof num, "%ld", interval);
    setenv("DMUTEX_TRACE_INTERVAL", num, 1);
    snprintf(num, sizeof num, "%ld", top);
    setenv("DMUTEX_TRACE_TOP", num, 1);
    snprintf(num, sizeof num, "%ld", min_locks);
    setenv("DMUTEX_TRACE_MIN_LOCKS", num, 1);
    /* exec keeps the pid: the program is the process that writes FILE. */
    snprintf(num, sizeof num, "%ld", (long)getpid());
    setenv("DMUTEX_TRACE_ROOT", num, 1);
    const char *old = getenv("LD_PRELOAD");
    char *preload;
    if (asprintf(&preload, "%s%s%s", lib, old && *old ? " " : "", old ? old : "") < 0)
        return 127;
    setenv("LD_PRELOAD", preload, 1);
    free(preload);
    execvp(argv[optind], argv + optind);
    fprintf(stderr, "dmutex trace: %s: %s\n", argv[optind], strerror(errno));
    return 127;
}
