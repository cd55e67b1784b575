/* dmutex check: resolve a config against a program and its libraries
 * without running the program. The program is started with the shim
 * preloaded and DMUTEX_CHECK set: the shim's constructor (shim/startup.c)
 * runs the very code a real start runs, with the loader's own view of the
 * libraries (DT_NEEDED, RUNPATH, LD_LIBRARY_PATH, default dirs), prints
 * what it would map and every error, and ends the process before main.
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

static const char check_usage[] =
    "usage: dmutex check -c CONFIG [-r REDIS_URL] [--] PROGRAM [ARGS...]\n"
    "\n"
    "Resolves CONFIG against PROGRAM and the libraries it loads at start,\n"
    "found as the loader finds them (it is the loader: PROGRAM is started with\n"
    "libdmutex.so preloaded and DMUTEX_CHECK=1, and the shim ends it before\n"
    "main; constructors of PROGRAM's libraries that run before the shim's do\n"
    "run, main and the program's own constructors do not). Prints one line per\n"
    "entry, tab-separated: NAME, OBJECT (- for the executable), what it names\n"
    "(SYMBOL[+OFFSET][[INDEX]], or init_site FUNCTION), and where: ADDRESS\n"
    "(FILE+OFFSET), FILE being the loaded file that holds it (for init_site,\n"
    "and the function's size in bytes); \"not loaded at start\" for an object a\n"
    "dlopen brings later (checked then), \"skipped\" for a missing entry with\n"
    "required = false. Then a summary line. Every error a real start would stop\n"
    "at is printed on stderr as it would be (FILE:LINE: ...), not only the\n"
    "first. Redis is not contacted.\n"
    "\n"
    "  -c, --config FILE     the config file (required)\n"
    "  -r, --redis URL       check this server URL instead of the config's\n"
    "  -h, --help            this text\n"
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
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "dmutex %s: fork: %s\n", cmd, strerror(errno));
        return 1;
    }
    if (pid == 0) {
        setenv("DMUTEX_CHECK", mode, 1);
        execv(file, prog_argv);
        fprintf(stderr, "dmutex %s: %s: %s\n", cmd, file, strerror(errno));
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR) {
            fprintf(stderr, "dmutex %s: waitpid: %s\n", cmd, strerror(errno));
            return 1;
        }
    }
    if (WIFEXITED(st) && (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == DM_EX_CONFIG ||
                          WEXITSTATUS(st) == 127))
        return WEXITSTATUS(st);
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
