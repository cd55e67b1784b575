/* dmutex check: resolve a config against a program and its libraries
 * without running the program. The program is started with the shim
 * preloaded and DMUTEX_CHECK set: the shim's constructor (shim/startup.c)
 * runs the very code a real start runs, with the loader's own view of the
 * libraries (DT_NEEDED, RUNPATH, LD_LIBRARY_PATH, default dirs), prints
 * what it would map and every error, and ends the process before main;
 * what each entry resolved to comes back through DMUTEX_CHECK_FD, and is
 * held against the debug info of its file (which the shim never reads).
 * `dmutex run` uses the same check (dm_cli_check_child, quiet) before it
 * starts the program for real. */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "cli.h"
#include "config.h"
#include "scan.h"

static const char check_usage[] =
    "usage: dmutex check -c CONFIG [-r REDIS_URL] [--] PROGRAM [ARGS...]\n"
    "\n"
    "Resolves CONFIG against PROGRAM and the libraries it loads at start,\n"
    "found as the loader finds them (it is the loader: PROGRAM is started with\n"
    "libdmutex.so preloaded and DMUTEX_CHECK=1, and the shim ends it before\n"
    "main; constructors of PROGRAM's libraries that run before the shim's do\n"
    "run, main and the program's own constructors do not). Prints one line per\n"
    "entry, tab-separated: NAME, OBJECT (- for the executable), what it names\n"
    "(SYMBOL[+OFFSET][[INDEX]], init_site FUNCTION or init_site_address), and\n"
    "where: ADDRESS (FILE+OFFSET), FILE being the loaded file that holds it (for\n"
    "init_site, and the function's size in bytes; for init_site_address, the\n"
    "one init call whose return address it is); \"not loaded at start\" for an\n"
    "object a dlopen brings later (checked then), \"skipped\" for a missing\n"
    "entry with required = false; and the protocol of its lock on the wire\n"
    "(dmutex, or setnx: docs/interop.md). Then a summary line: per kind, the entries\n"
    "mapped now, the init_site functions and init_site_address calls that map\n"
    "theirs as they are made. Every error a real start would stop\n"
    "at is printed on stderr as it would be (FILE:LINE: ...), not only the\n"
    "first. Redis is not contacted.\n"
    "\n"
    "Then, in each file an entry resolved into that has debug info, what the\n"
    "entry names is held against its type: a lock of a kind the shim does not\n"
    "interpose (a GLib GStaticMutex, GMutex, GCond; a spin lock), a lock of\n"
    "another list's kind (a cnd_t in mutexes) or the inside of a lock is an\n"
    "error too (the shim alone tells only a variable too small for its list).\n"
    "\n"
    "  -c, --config FILE     the config file (required)\n"
    "  -r, --redis URL       check this server URL, a REDIS_URL (below), instead\n"
    "                        of the config's\n"
    "  -h, --help            this text\n"
    "\n"
    DM_URL_HELP
    "\n"
    "Exit status: 0 if PROGRAM would start with every entry mapped; 78 if a\n"
    "real start would stop (config or entry errors); 2 usage; 127 if PROGRAM\n"
    "cannot be run; 1 if it cannot be checked: statically linked, or set-user-ID,\n"
    "set-group-ID or with file capabilities (the loader would not preload the\n"
    "shim, so PROGRAM would run for real; it is not started).\n";

/* The file execvp would run for `prog` (PATH search for a bare name). */
static int which(const char *prog, char *out, size_t len)
{
    if (strchr(prog, '/')) {
        snprintf(out, len, "%s", prog);
        return access(out, X_OK);
    }
    const char *path = getenv("PATH");
    for (const char *d = path ? path : "/usr/bin:/bin"; *d;) {
        size_t n = strcspn(d, ":");
        snprintf(out, len, "%.*s/%s", (int)n, n ? d : ".", prog);
        struct stat st;
        if (access(out, X_OK) == 0 && stat(out, &st) == 0 && S_ISREG(st.st_mode))
            return 0;
        d += n;
        if (*d == ':')
            d++;
    }
    return -1;
}

/* Does the loader (and so the preload of `lib`) reach `file`? 1: a
 * dynamically linked ELF file, or a script whose interpreter is one; 0:
 * not (why says so; `verb` is what could not be done: "checked",
 * "traced"); -1: cannot tell (execve will say why). */
static int preloadable(const char *file, const char *lib, const char *verb, char *why, size_t len,
                       int depth)
{
    /* A set-user-ID or set-group-ID file, or one with file capabilities,
     * runs with AT_SECURE: ld.so ignores a preload given as a path, so the
     * shim would not be there to stop it, and the check would run it. */
    struct stat st;
    if (stat(file, &st) == 0 && (st.st_mode & (S_ISUID | S_ISGID))) {
        snprintf(why, len, "%s: set-user-ID or set-group-ID: the loader does not preload "
                 "%s by path into it (AT_SECURE), so it cannot be %s", file, lib, verb);
        return 0;
    }
    if (getxattr(file, "security.capability", NULL, 0) >= 0) {
        snprintf(why, len, "%s: has file capabilities: the loader does not preload "
                 "%s by path into it (AT_SECURE), so it cannot be %s", file, lib, verb);
        return 0;
    }
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    unsigned char buf[PATH_MAX + 2];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n < 0) {
        close(fd);
        return -1;
    }
    buf[n] = 0;
    if (n >= 2 && buf[0] == '#' && buf[1] == '!' && depth == 0) {
        close(fd);
        char *p = (char *)buf + 2;
        p += strspn(p, " \t");
        p[strcspn(p, " \t\n")] = 0;
        return preloadable(p, lib, verb, why, len, 1);
    }
    int dyn = -1;
    if (n >= (ssize_t)sizeof(Elf64_Ehdr) && memcmp(buf, ELFMAG, SELFMAG) == 0 &&
        buf[EI_CLASS] == ELFCLASS64) {
        Elf64_Ehdr eh;
        memcpy(&eh, buf, sizeof eh);
        dyn = 0;
        for (int i = 0; i < eh.e_phnum; i++) {
            Elf64_Phdr ph;
            if (pread(fd, &ph, sizeof ph, (off_t)(eh.e_phoff + (Elf64_Off)i * eh.e_phentsize)) !=
                (ssize_t)sizeof ph)
                break;
            if (ph.p_type == PT_INTERP)
                dyn = 1;
        }
    } else if (n >= (ssize_t)sizeof(Elf32_Ehdr) && memcmp(buf, ELFMAG, SELFMAG) == 0) {
        dyn = 0;
        snprintf(why, len, "%s: a 32-bit ELF file: the 64-bit %s is not loaded into it", file,
                 lib);
        close(fd);
        return 0;
    }
    close(fd);
    if (dyn == 0)
        snprintf(why, len, "%s: statically linked (no PT_INTERP): LD_PRELOAD does not reach it, "
                 "so %s", file, strcmp(verb, "traced") == 0 ? "it cannot be traced"
                                                            : "no mutex of it can be cluster-wide");
    return dyn;
}

int dm_cli_preload_reaches(const char *prog, const char *lib, const char *verb, char *why,
                           size_t len)
{
    char file[PATH_MAX];
    if (which(prog, file, sizeof file) != 0)
        return -1;
    return preloadable(file, lib, verb, why, len, 0) == 0 ? 0 : 1;
}

/* ---- the debug info's say ------------------------------------------------
 * The shim resolves entries by symbol and size only: a GLib GStaticMutex
 * (48 bytes, a pthread_mutex_t member GLib never locks) or a cond named in
 * `mutexes` resolves as well as a mutex does. The check reads what each
 * entry resolved to (DMUTEX_CHECK_FD: startup.c's records) and, where the
 * file has debug info, refuses an entry whose bytes debug info says are a
 * lock the shim does not interpose, a lock of another list's kind, or the
 * inside of a lock: mapped, each would be reported mapped and exclude
 * nothing. Without debug info nothing more can be told. */

struct record {
    int line;
    char *list, *file, *what, *name;
    GElf_Addr vaddr;
};

/* The lock kind each config list maps, as messages name it. */
static const char *list_types(const char *list)
{
    return strcmp(list, "conds") == 0 ? "a pthread_cond_t, cnd_t or std::condition_variable"
         : strcmp(list, "rwlocks") == 0 ? "a pthread_rwlock_t or std::shared_mutex"
                                        : "a pthread_mutex_t, mtx_t or std::mutex";
}

static const char *kind_list(enum kind k)
{
    return k == KIND_COND ? "conds" : k == KIND_RWLOCK ? "rwlocks" : "mutexes";
}

/* What such an entry would do, and the fix, per list. */
static const char *list_fix(const char *list)
{
    return strcmp(list, "conds") == 0
        ? "Listed, it would wake no other process: wait on a pthread_cond_t, cnd_t or "
          "std::condition_variable and list that one"
        : strcmp(list, "rwlocks") == 0
        ? "Listed, it would exclude nothing: lock the data with a pthread_rwlock_t or "
          "std::shared_mutex and list that one"
        : "Mapped, it would exclude nothing: lock the data with a pthread_mutex_t, mtx_t or "
          "std::mutex and map that one";
}

/* The error of one entry against what debug info says is at it, or 0. */
static int judge(const struct record *r, const struct dwarf_at *a, const char *cfg,
                 const char *cmd)
{
    if (!a->found || !a->type)
        return 0;
    const char *base = strrchr(r->file, '/') ? strrchr(r->file, '/') + 1 : r->file;
    if (a->foreign) {
        fprintf(stderr, "dmutex %s: error: %s:%d: %s in %s is a %s (debug info: %s), not %s: "
                "%s. %s\n", cmd, cfg, r->line, r->what, base, a->type, a->var,
                list_types(r->list), a->foreign->why, list_fix(r->list));
        return 1;
    }
    if (a->into != 0) {
        fprintf(stderr, "dmutex %s: error: %s:%d: %s in %s is %ld bytes into the %s %s (debug "
                "info), not the start of one: nothing locks it there. Name the %s itself "
                "(its offset is %ld bytes less)\n", cmd, cfg, r->line, r->what, base, a->into,
                a->type, a->var, a->type, a->into);
        return 1;
    }
    if (strcmp(kind_list(a->kind), r->list) != 0) {
        fprintf(stderr, "dmutex %s: error: %s:%d: %s in %s is a %s (debug info: %s), not %s: "
                "the program never calls on it what a %s entry interposes, so it would be "
                "reported mapped and never used. List it in %s\n", cmd, cfg, r->line, r->what,
                base, a->type, a->var, list_types(r->list), r->list, kind_list(a->kind));
        return 1;
    }
    return 0;
}

/* Splits `text` (the records) into recs; returns their count. The
 * strings point into text. */
static size_t parse_records(char *text, struct record *recs, size_t max, char **cfg,
                            char **summary, int *nerrors)
{
    size_t n = 0;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = 0;
        char *f[8];
        int nf = 0;
        for (char *p = line; nf < 8 && p; nf++) {
            f[nf] = p;
            p = strchr(p, '\t');
            if (p)
                *p++ = 0;
        }
        if (nf == 2 && strcmp(f[0], "C") == 0)
            *cfg = f[1];
        else if (nf == 2 && strcmp(f[0], "S") == 0)
            *summary = f[1];
        else if (nf == 2 && strcmp(f[0], "N") == 0)
            *nerrors = atoi(f[1]);
        else if (nf == 7 && strcmp(f[0], "E") == 0 && n < max)
            recs[n++] = (struct record){ .line = atoi(f[1]), .list = f[2], .file = f[3],
                                         .vaddr = strtoull(f[4], NULL, 16), .what = f[5],
                                         .name = f[6] };
    }
    return n;
}

/* The errors debug info finds in the records, printed; their count. */
static int check_debug_info(struct record *recs, size_t n, const char *cfg, const char *cmd)
{
    int errors = 0;
    int *done = calloc(n ? n : 1, sizeof *done);
    struct dwarf_at *at = calloc(n ? n : 1, sizeof *at);
    if (!done || !at) {
        free(done);
        free(at);
        return 0;
    }
    elf_version(EV_CURRENT);
    for (size_t i = 0; i < n; i++) {
        if (done[i])
            continue;
        /* Every record of this file, in one walk of its debug info. */
        size_t k = 0;
        size_t *idx = calloc(n, sizeof *idx);
        if (!idx)
            break;
        for (size_t j = i; j < n; j++)
            if (!done[j] && strcmp(recs[j].file, recs[i].file) == 0) {
                done[j] = 1;
                idx[k] = j;
                at[k++].vaddr = recs[j].vaddr;
            }
        struct file f;
        memset(&f, 0, sizeof f);
        f.e.fd = -1;
        int quiet = dup(STDERR_FILENO), null = open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (quiet >= 0 && null >= 0)
            dup2(null, STDERR_FILENO);     /* dm_scan_open's words are scan's, not ours */
        int opened = dm_scan_open(&f, recs[i].file, 0) == 0;
        if (quiet >= 0 && null >= 0)
            dup2(quiet, STDERR_FILENO);
        if (quiet >= 0)
            close(quiet);
        if (null >= 0)
            close(null);
        if (opened && f.dw) {
            dm_scan_dwarf_at(&f, at, k);
            for (size_t j = 0; j < k; j++)
                errors += judge(&recs[idx[j]], &at[j], cfg, cmd);
        }
        dm_scan_close(&f);
        free(idx);
    }
    free(done);
    free(at);
    return errors;
}

int dm_cli_check_child(const char *mode, char **prog_argv, const char *cmd)
{
    char file[PATH_MAX], why[PATH_MAX + 160];
    if (which(prog_argv[0], file, sizeof file) != 0) {
        fprintf(stderr, "dmutex %s: %s: %s\n", cmd, prog_argv[0], strerror(ENOENT));
        return 127;
    }
    int p = preloadable(file, "libdmutex.so", "checked", why, sizeof why, 0);
    if (p == 0) {
        fprintf(stderr, "dmutex %s: %s\n", cmd, why);
        return 1;
    }
    fflush(stdout);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        fprintf(stderr, "dmutex %s: pipe: %s\n", cmd, strerror(errno));
        return 1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "dmutex %s: fork: %s\n", cmd, strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return 1;
    }
    if (pid == 0) {
        char fd[16];
        snprintf(fd, sizeof fd, "%d", fds[1]);
        fcntl(fds[1], F_SETFD, 0);     /* the program's: the shim writes its records there */
        setenv("DMUTEX_CHECK", mode, 1);
        setenv("DMUTEX_CHECK_FD", fd, 1);
        execv(file, prog_argv);
        fprintf(stderr, "dmutex %s: %s: %s\n", cmd, file, strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    /* Read while it runs: a config of many entries fills a pipe. */
    size_t len = 0, cap = 4096;
    char *text = malloc(cap);
    for (ssize_t got; text;) {
        if (len + 1 >= cap) {
            char *t = realloc(text, cap * 2);
            if (!t) {
                free(text);
                text = NULL;
                break;
            }
            text = t;
            cap *= 2;
        }
        got = read(fds[0], text + len, cap - len - 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        len += (size_t)got;
    }
    if (!text) {
        /* out of memory: drain, so that the program is not stuck writing */
        char sink[4096];
        while (read(fds[0], sink, sizeof sink) > 0 || errno == EINTR) {
        }
    } else {
        text[len] = 0;
    }
    close(fds[0]);
    int st;
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR) {
            fprintf(stderr, "dmutex %s: waitpid: %s\n", cmd, strerror(errno));
            free(text);
            return 1;
        }
    }
    if (WIFEXITED(st) && (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == DM_EX_CONFIG)) {
        size_t lines = 0;
        for (const char *p = text; p && *p; p++)
            lines += *p == '\n';
        struct record *recs = calloc(lines ? lines : 1, sizeof *recs);
        char *cfg = "config", *summary = NULL;
        int shim_errors = 0;
        size_t n = text && recs ? parse_records(text, recs, lines, &cfg, &summary, &shim_errors)
                                : 0;
        int errors = check_debug_info(recs, n, cfg, cmd);
        /* The shim left its count to us (N); a config error before any
         * entry ended it with its own words. */
        if (shim_errors + errors)
            fprintf(stderr, "dmutex %s: error: %d error%s: the program would not start\n", cmd,
                    shim_errors + errors, shim_errors + errors == 1 ? "" : "s");
        else if (WEXITSTATUS(st) == 0 && summary && strcmp(mode, "quiet") != 0)
            printf("%s\n", summary);
        free(recs);
        free(text);
        fflush(stdout);
        return errors || WEXITSTATUS(st) == DM_EX_CONFIG ? DM_EX_CONFIG : 0;
    }
    free(text);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 127)
        return 127;
    /* The shim ends a check with 0 or 78: anything else means it did not
     * (not preloaded after all, or killed). */
    if (WIFSIGNALED(st))
        fprintf(stderr, "dmutex %s: %s was killed by signal %d during the check\n", cmd, file,
                WTERMSIG(st));
    else
        fprintf(stderr, "dmutex %s: %s exited %d, not through the shim's check: was "
                "libdmutex.so loaded into it?\n", cmd, file, WEXITSTATUS(st));
    return 1;
}

int dm_cli_check(int argc, char **argv)
{
    static const struct option opts[] = {
        { "config", required_argument, NULL, 'c' },
        { "redis", required_argument, NULL, 'r' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *cfg_path = NULL, *redis = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "+c:r:h", opts, NULL)) != -1) {
        switch (c) {
        case 'c': cfg_path = optarg; break;
        case 'r': redis = optarg; break;
        case 'h': fputs(check_usage, stdout); return 0;
        default: fputs(check_usage, stderr); return 2;
        }
    }
    if (dm_cli_need_config_and_program("check", cfg_path, optind < argc, check_usage) != 0)
        return 2;
    int r = dm_cli_preload_env("check", cfg_path, redis, NULL);
    if (r != 0)
        return r;
    return dm_cli_check_child("1", argv + optind, "check");
}
