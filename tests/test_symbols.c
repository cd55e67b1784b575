/* test_symbols: config names -> addresses in this very process. The
 * variables live in tests/symdata (two C files with a same-named static, a
 * C++ file, a library linked in and one loaded with dlopen); each exports its
 * real address through a function, and every answer of dm_symbols_* is
 * compared with it. Built twice: PIE (test_symbols) and non-PIE
 * (test_symbols_nopie), see tests/symbols.mk. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "sym_data.h"
#include "symbols.h"
#include "harness.h"

#define MUTEX_SIZE sizeof(pthread_mutex_t)
#define ERR_LEN    512
#define N_THREADS  8
#define N_LOOKUPS  500

static char err[ERR_LEN];

static uintptr_t find_ok(const char *object, const char *symbol, long offset)
{
    uintptr_t addr = 0;
    err[0] = '\0';
    int rc = dm_symbols_find(object, symbol, offset, MUTEX_SIZE, "a pthread_mutex_t", &addr, err,
                             sizeof err);
    if (rc != 0)
        fail_msg("dm_symbols_find(%s, %s, %ld) = %d: %s", object ? object : "NULL",
                 symbol, offset, rc, err);
    return addr;
}

static int find_rc(const char *object, const char *symbol, long offset)
{
    uintptr_t addr = 0;
    err[0] = '\0';
    int rc = dm_symbols_find(object, symbol, offset, MUTEX_SIZE, "a pthread_mutex_t", &addr, err,
                             sizeof err);
    if (rc != 0 && err[0] == '\0')
        fail_msg("dm_symbols_find(%s) = %d with no message", symbol, rc);
    return rc;
}

static void assert_err_has(const char *needle)
{
    if (!strstr(err, needle))
        fail_msg("error \"%s\" does not mention \"%s\"", err, needle);
}

/* The directory this test program is in (build/tests). */
static const char *exe_dir(void)
{
    static char dir[PATH_MAX];
    char path[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    assert_true(n > 0);
    path[n] = '\0';
    snprintf(dir, sizeof dir, "%s", dirname(path));
    return dir;
}

static const char *exe_base(void)
{
    static char base[PATH_MAX];
    char path[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    assert_true(n > 0);
    path[n] = '\0';
    snprintf(base, sizeof base, "%s", basename(path));
    return base;
}

static int teardown(void **state)
{
    (void)state;
    dm_symbols_flush();
    return 0;
}

/* ---- the executable ---------------------------------------------------- */

static void test_global_mutex_resolves_to_its_address(void **state)
{
    (void)state;
    assert_ptr_equal(find_ok(NULL, "sym_global_lock", 0), (uintptr_t)&sym_global_lock);
}

static void test_executable_found_by_its_file_name_and_full_path(void **state)
{
    (void)state;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", exe_dir(), exe_base());
    assert_ptr_equal(find_ok(exe_base(), "sym_global_lock", 0), (uintptr_t)&sym_global_lock);
    assert_ptr_equal(find_ok(path, "sym_global_lock", 0), (uintptr_t)&sym_global_lock);
}

static void test_static_in_two_files_is_ambiguous_and_lists_both(void **state)
{
    (void)state;
    assert_int_equal(find_rc(NULL, "cache_lock", 0), ENOTUNIQ);
    assert_err_has("sym_a.c:cache_lock");
    assert_err_has("sym_b.c:cache_lock");
    assert_err_has(exe_base());
}

static void test_file_qualified_static_resolves_each_file(void **state)
{
    (void)state;
    assert_ptr_equal(find_ok(NULL, "sym_a.c:cache_lock", 0), (uintptr_t)sym_a_cache_lock());
    assert_ptr_equal(find_ok(NULL, "sym_b.c:cache_lock", 0), (uintptr_t)sym_b_cache_lock());
    assert_ptr_not_equal(sym_a_cache_lock(), sym_b_cache_lock());
}

static void test_file_qualified_static_accepts_the_source_path(void **state)
{
    (void)state;
    assert_ptr_equal(find_ok(NULL, "tests/symdata/sym_b.c:cache_lock", 0),
                     (uintptr_t)sym_b_cache_lock());
}

static void test_unique_static_needs_no_file_name(void **state)
{
    (void)state;
    assert_ptr_equal(find_ok(NULL, "only_in_a_lock", 0), (uintptr_t)sym_a_only_lock());
}

static void test_function_scope_static_answers_to_its_source_name(void **state)
{
    (void)state;
    assert_ptr_equal(find_ok(NULL, "fn_lock", 0), (uintptr_t)sym_fn_lock());
    assert_ptr_equal(find_ok(NULL, "sym_a.c:fn_lock", 0), (uintptr_t)sym_fn_lock());
}

static void test_file_qualified_global_is_enoent_with_a_hint(void **state)
{
    (void)state;
    assert_int_equal(find_rc(NULL, "sym_a.c:sym_global_lock", 0), ENOENT);
    assert_err_has("drop the \"sym_a.c:\"");
}

static void test_static_of_another_file_is_enoent(void **state)
{
    (void)state;
    assert_int_equal(find_rc(NULL, "sym_b.c:only_in_a_lock", 0), ENOENT);
    assert_err_has("sym_b.c:only_in_a_lock");
}

static void test_struct_member_at_offset(void **state)
{
    (void)state;
    long off = (long)offsetof(struct sym_inventory, lock);
    assert_ptr_equal(find_ok(NULL, "sym_inventory", off), (uintptr_t)&sym_inventory.lock);
}

static void test_array_element_at_index_times_size(void **state)
{
    (void)state;
    for (long i = 0; i < 4; i++)
        assert_ptr_equal(find_ok(NULL, "sym_slots", i * (long)MUTEX_SIZE),
                         (uintptr_t)&sym_slots[i]);
}

static void test_offset_past_the_end_is_erange(void **state)
{
    (void)state;
    assert_int_equal(find_rc(NULL, "sym_slots", 4 * (long)MUTEX_SIZE), ERANGE);
    assert_err_has("160 bytes");
    assert_int_equal(find_rc(NULL, "sym_inventory", (long)sizeof sym_inventory - 8), ERANGE);
}

static void test_negative_offset_is_einval(void **state)
{
    (void)state;
    assert_int_equal(find_rc(NULL, "sym_slots", -40), EINVAL);
    assert_err_has("negative");
}

static void test_too_small_object_is_erange_and_gives_both_sizes(void **state)
{
    (void)state;
    char want[128];
    assert_int_equal(find_rc(NULL, "sym_small_lock", 0), ERANGE);
    snprintf(want, sizeof want, "sym_small_lock in %s is 4 bytes: a pthread_mutex_t (%zu bytes) "
             "at offset 0 does not fit in it", exe_base(), MUTEX_SIZE);
    assert_err_has(want);
}

/* The messages name what the caller needs there, not a mutex: a cond
 * entry's error is about a pthread_cond_t, an rwlock entry's about a
 * pthread_rwlock_t; without words for it, the bytes. */
static void test_what_does_not_fit_is_named_as_the_caller_says(void **state)
{
    (void)state;
    char want[160];
    uintptr_t addr;
    long past = 4 * (long)MUTEX_SIZE;
    assert_int_equal(dm_symbols_find(NULL, "sym_slots", past, sizeof(pthread_cond_t),
                                     "a pthread_cond_t", &addr, err, sizeof err), ERANGE);
    snprintf(want, sizeof want, "sym_slots in %s is %zu bytes: a pthread_cond_t (%zu bytes) at "
             "offset %ld does not fit in it", exe_base(), sizeof sym_slots,
             sizeof(pthread_cond_t), past);
    assert_err_has(want);
    assert_int_equal(dm_symbols_find(NULL, "sym_small_lock", 0, sizeof(pthread_rwlock_t), NULL,
                                     &addr, err, sizeof err), ERANGE);
    snprintf(want, sizeof want, "is 4 bytes: %zu bytes at offset 0 do not fit in it",
             sizeof(pthread_rwlock_t));
    assert_err_has(want);
    assert_int_equal(dm_symbols_find(NULL, "sym_sizeless", 0, sizeof(pthread_cond_t),
                                     "a pthread_cond_t", &addr, err, sizeof err), EINVAL);
    snprintf(want, sizeof want, "so a pthread_cond_t (%zu bytes) cannot be checked to fit in it",
             sizeof(pthread_cond_t));
    assert_err_has(want);
    if (strstr(err, "mutex"))
        fail_msg("a cond's error speaks of a mutex: %s", err);
}

static void test_sizeless_symbol_is_einval(void **state)
{
    (void)state;
    assert_int_equal(find_rc(NULL, "sym_sizeless", 0), EINVAL);
    assert_err_has("size 0");
}

static void test_missing_symbol_is_enoent_and_names_the_object(void **state)
{
    (void)state;
    assert_int_equal(find_rc(NULL, "no_such_lock", 0), ENOENT);
    assert_err_has("symbol no_such_lock not found in /");
    assert_err_has(exe_base());
    assert_err_has("(searched .symtab)");
}

static void test_unloaded_object_is_enoent(void **state)
{
    (void)state;
    assert_int_equal(find_rc("libledger.so", "ledger_lock", 0), ENOENT);
    assert_err_has("object libledger.so is not loaded");
}

static void test_thread_local_is_einval(void **state)
{
    (void)state;
    assert_int_equal(find_rc(NULL, "sym_tls_lock", 0), EINVAL);
    assert_err_has("thread-local");
}

static void test_function_is_not_a_data_object(void **state)
{
    (void)state;
    assert_int_equal(find_rc(NULL, "sym_known_function", 0), EINVAL);
    assert_err_has("sym_known_function");
    assert_err_has("is a function, not a data object");
}

static void test_empty_symbol_is_einval(void **state)
{
    (void)state;
    assert_int_equal(find_rc(NULL, "", 0), EINVAL);
}

static void test_error_is_truncated_to_the_buffer(void **state)
{
    (void)state;
    char small[16];
    uintptr_t addr;
    memset(small, 'x', sizeof small);
    assert_int_equal(dm_symbols_find(NULL, "no_such_lock", 0, MUTEX_SIZE, NULL, &addr,
                                     small, sizeof small), ENOENT);
    assert_int_equal(strlen(small), sizeof small - 1);
    assert_int_equal(dm_symbols_find(NULL, "no_such_lock", 0, MUTEX_SIZE, NULL, &addr, NULL, 0),
                     ENOENT);
}

/* ---- C++ ---------------------------------------------------------------- */

static void test_cxx_std_mutex_global_is_found_by_its_name(void **state)
{
    (void)state;
    assert_ptr_equal(find_ok(NULL, "sym_cxx_global_lock", 0), (uintptr_t)sym_cxx_lock());
    assert_ptr_equal(find_ok(NULL, "sym_cxx_recursive", 0), (uintptr_t)sym_cxx_recursive_lock());
}

static void test_cxx_namespaced_mutex_is_found_by_its_mangled_name(void **state)
{
    (void)state;
    assert_ptr_equal(find_ok(NULL, "_ZN3app7ns_lockE", 0), (uintptr_t)sym_cxx_ns_lock());
}

/* ---- libraries ---------------------------------------------------------- */

static void test_library_linked_at_start_global_and_static(void **state)
{
    (void)state;
    assert_ptr_equal(find_ok("libsymlib.so", "symlib_lock", 0), (uintptr_t)symlib_lock_addr());
    assert_ptr_equal(find_ok("libsymlib.so", "symlib_static_lock", 0),
                     (uintptr_t)symlib_static_lock_addr());
    assert_ptr_equal(find_ok("libsymlib.so", "symlib.c:symlib_static_lock", 0),
                     (uintptr_t)symlib_static_lock_addr());
}

static void test_library_found_by_full_path(void **state)
{
    (void)state;
    Dl_info info;
    assert_true(dladdr(symlib_lock_addr(), &info));
    assert_ptr_equal(find_ok(info.dli_fname, "symlib_lock", 0), (uintptr_t)symlib_lock_addr());
}

static void test_library_symbol_is_not_in_the_executable(void **state)
{
    (void)state;
    assert_int_equal(find_rc(NULL, "symlib_static_lock", 0), ENOENT);
}

/* The program names symlib_copied_lock directly, so the linker gave it a
 * copy (R_X86_64_COPY) and the library's own code uses that copy too. */
static void test_library_global_moved_by_copy_relocation_resolves_to_live_copy(void **state)
{
    (void)state;
    uintptr_t live = (uintptr_t)&symlib_copied_lock;
    assert_ptr_equal(symlib_copied_lock_addr(), (void *)live);
    assert_ptr_equal(find_ok("libsymlib.so", "symlib_copied_lock", 0), live);
    assert_ptr_equal(find_ok("libsymlib.so", "symlib_copied_lock", 0), live);
}

struct dl {
    void *handle;
    char path[PATH_MAX];
};

static void dl_open(struct dl *d, const char *path)
{
    snprintf(d->path, sizeof d->path, "%s", path);
    d->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!d->handle)
        fail_msg("dlopen %s: %s", path, dlerror());
}

static uintptr_t dl_addr(struct dl *d, const char *fn)
{
    void *(*f)(void) = (void *(*)(void))dlsym(d->handle, fn);
    assert_non_null(f);
    return (uintptr_t)f();
}

static void test_dlopened_library_global_and_static(void **state)
{
    (void)state;
    struct dl d;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/symdata/libsymdl.so", exe_dir());
    dl_open(&d, path);
    assert_ptr_equal(find_ok("libsymdl.so", "symdl_lock", 0), dl_addr(&d, "symdl_lock_addr"));
    assert_ptr_equal(find_ok("libsymdl.so", "symdl_static_lock", 0),
                     dl_addr(&d, "symdl_static_lock_addr"));
    dlclose(d.handle);
}

static void test_qualified_static_without_file_names_says_why(void **state)
{
    (void)state;
    struct dl d;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/symdata/libsymnofile.so", exe_dir());
    dl_open(&d, path);
    assert_int_equal(find_rc("libsymnofile.so", "symdl.c:symdl_static_lock", 0), ENOENT);
    assert_err_has("no file names");
    assert_ptr_equal(find_ok("libsymnofile.so", "symdl_static_lock", 0),
                     dl_addr(&d, "symdl_static_lock_addr"));
    dlclose(d.handle);
}

static void test_unloaded_after_dlclose_is_enoent(void **state)
{
    (void)state;
    struct dl d;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/symdata/libsymdl.so", exe_dir());
    dl_open(&d, path);
    find_ok("libsymdl.so", "symdl_lock", 0);
    assert_int_equal(dlclose(d.handle), 0);
    dm_symbols_flush();
    assert_int_equal(find_rc("libsymdl.so", "symdl_lock", 0), ENOENT);
    assert_err_has("not loaded");
}

/* ---- addresses: dmutex trace's identification and address entries ----- */

static void test_where_names_the_global_and_the_element_of_an_array(void **state)
{
    (void)state;
    struct dm_symbols_where w;
    assert_int_equal(dm_symbols_where((uintptr_t)&sym_global_lock, 0, &w), 0);
    assert_string_equal(w.symbol, "sym_global_lock");
    assert_true(w.is_exe);
    assert_int_equal(w.vaddr, w.sym_value);
    assert_int_equal(w.sym_size, sizeof(pthread_mutex_t));
    assert_int_equal(dm_symbols_where((uintptr_t)&sym_slots[2], 0, &w), 0);
    assert_string_equal(w.symbol, "sym_slots");
    assert_int_equal(w.vaddr - w.sym_value, 2 * sizeof(pthread_mutex_t));
    /* A function's code, for init sites. */
    assert_int_equal(dm_symbols_where((uintptr_t)&exe_dir, 1, &w), 0);
    assert_string_equal(w.symbol, "exe_dir");
}

static void test_where_outside_every_object_is_enoent(void **state)
{
    (void)state;
    struct dm_symbols_where w;
    int on_stack;
    assert_int_equal(dm_symbols_where((uintptr_t)&on_stack, 0, &w), ENOENT);
}

static void test_address_of_this_build_resolves_and_another_build_is_estale(void **state)
{
    (void)state;
    struct dm_symbols_where w;
    assert_int_equal(dm_symbols_where((uintptr_t)&sym_global_lock, 0, &w), 0);
    assert_true(w.build_id[0] != '\0');
    uintptr_t addr = 0;
    err[0] = '\0';
    assert_int_equal(dm_symbols_at(NULL, w.vaddr, sizeof(pthread_mutex_t), 0, w.build_id,
                                   &addr, err, sizeof err), 0);
    assert_ptr_equal(addr, (uintptr_t)&sym_global_lock);
    assert_int_equal(dm_symbols_at(NULL, w.vaddr, sizeof(pthread_mutex_t), 0, NULL,
                                   &addr, err, sizeof err), 0);
    assert_ptr_equal(addr, (uintptr_t)&sym_global_lock);
    assert_int_equal(dm_symbols_at(NULL, w.vaddr, sizeof(pthread_mutex_t), 0, "00112233",
                                   &addr, err, sizeof err), ESTALE);
    assert_err_has("build-id 00112233");
    assert_err_has(w.build_id);
}

static void test_address_in_the_wrong_kind_of_segment_is_einval(void **state)
{
    (void)state;
    struct dm_symbols_where w;
    uintptr_t addr;
    assert_int_equal(dm_symbols_where((uintptr_t)&sym_global_lock, 0, &w), 0);
    /* Data is not code, and no segment reaches that far. */
    assert_int_equal(dm_symbols_at(NULL, w.vaddr, 1, 1, NULL, &addr, err, sizeof err), EINVAL);
    assert_err_has("not code");
    assert_int_equal(dm_symbols_at(NULL, (uintptr_t)1 << 46, 1, 0, NULL, &addr, err, sizeof err),
                     EINVAL);
    assert_err_has("outside its loaded segments");
}

/* A private copy of libsymdl.so named `name` in a fresh directory. */
static void copy_library(const char *name, char *dir, size_t dirlen, char *path, size_t pathlen)
{
    char src[PATH_MAX];
    snprintf(src, sizeof src, "%s/symdata/libsymdl.so", exe_dir());
    snprintf(dir, dirlen, "/tmp/test_symbols.XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(path, pathlen, "%s/%s", dir, name);
    int in = open(src, O_RDONLY), out = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0755);
    assert_true(in >= 0 && out >= 0);
    char buf[8192];
    ssize_t n;
    while ((n = read(in, buf, sizeof buf)) > 0)
        assert_int_equal(write(out, buf, (size_t)n), n);
    close(in);
    close(out);
}

static void test_object_given_without_version_matches_versioned_file(void **state)
{
    (void)state;
    char dir[64], path[PATH_MAX];
    struct dl d;
    copy_library("libsymcopy.so.1", dir, sizeof dir, path, sizeof path);
    dl_open(&d, path);
    assert_ptr_equal(find_ok("libsymcopy.so", "symdl_lock", 0), dl_addr(&d, "symdl_lock_addr"));
    assert_ptr_equal(find_ok("libsymcopy.so.1", "symdl_lock", 0), dl_addr(&d, "symdl_lock_addr"));
    assert_int_equal(find_rc("libsymcop.so", "symdl_lock", 0), ENOENT);
    assert_int_equal(find_rc("libsymcopy", "symdl_lock", 0), ENOENT);
    dlclose(d.handle);
    unlink(path);
    rmdir(dir);
}

static void test_two_loaded_files_of_one_name_are_ambiguous(void **state)
{
    (void)state;
    char dir[2][64], path[2][PATH_MAX];
    struct dl d[2];
    for (int i = 0; i < 2; i++) {
        copy_library("libsymtwin.so", dir[i], sizeof dir[i], path[i], sizeof path[i]);
        dl_open(&d[i], path[i]);
    }
    assert_int_equal(find_rc("libsymtwin.so", "symdl_lock", 0), ENOTUNIQ);
    assert_err_has(path[0]);
    assert_err_has(path[1]);
    for (int i = 0; i < 2; i++) {
        assert_ptr_equal(find_ok(path[i], "symdl_lock", 0), dl_addr(&d[i], "symdl_lock_addr"));
        dlclose(d[i].handle);
        unlink(path[i]);
        rmdir(dir[i]);
    }
}

/* The cache is observable: once read, a table answers even after its file
 * is gone; after a flush the file is read again, and its absence is said. */
static void test_cached_table_answers_after_the_file_is_gone(void **state)
{
    (void)state;
    char dir[64], path[PATH_MAX];
    struct dl d;
    copy_library("libsymcopy.so.1", dir, sizeof dir, path, sizeof path);
    dl_open(&d, path);
    uintptr_t want = dl_addr(&d, "symdl_static_lock_addr");
    assert_ptr_equal(find_ok("libsymcopy.so", "symdl_static_lock", 0), want);
    unlink(path);
    for (int i = 0; i < N_LOOKUPS; i++)
        assert_ptr_equal(find_ok("libsymcopy.so", "symdl_static_lock", 0), want);
    dm_symbols_flush();
    assert_int_equal(find_rc("libsymcopy.so", "symdl_static_lock", 0), ENOENT);
    assert_err_has("cannot read the symbols of");
    assert_err_has(path);
    dlclose(d.handle);
    rmdir(dir);
}

/* ---- functions ---------------------------------------------------------- */

static void test_function_range_contains_the_function(void **state)
{
    (void)state;
    uintptr_t start = 0, end = 0;
    int rc = dm_symbols_function(NULL, "sym_known_function", &start, &end, err, sizeof err);
    if (rc != 0)
        fail_msg("%s", err);
    uintptr_t f = (uintptr_t)sym_known_function;
    assert_true(start == f);
    assert_true(end > start && end - start < 4096);
    assert_int_equal(sym_known_function(1), 4);
}

static void test_function_in_library_range(void **state)
{
    (void)state;
    uintptr_t start = 0, end = 0;
    int rc = dm_symbols_function("libsymlib.so", "symlib_lock_addr", &start, &end,
                                 err, sizeof err);
    if (rc != 0)
        fail_msg("%s", err);
    /* In a non-PIE program &symlib_lock_addr is a PLT stub of the program;
     * the library's handle gives the code itself. */
    void *lib = dlopen("libsymlib.so", RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(lib);
    uintptr_t code = (uintptr_t)dlsym(lib, "symlib_lock_addr");
    dlclose(lib);
    assert_true(start == code);
    assert_true(end > start && end - start < 4096);
}

static void test_function_lookup_rejects_data(void **state)
{
    (void)state;
    uintptr_t start, end;
    assert_int_equal(dm_symbols_function(NULL, "sym_global_lock", &start, &end,
                                         err, sizeof err), EINVAL);
    assert_err_has("is a data object, not a function");
    assert_int_equal(dm_symbols_function(NULL, "no_such_function", &start, &end,
                                         err, sizeof err), ENOENT);
    assert_int_equal(dm_symbols_function("libnope.so", "f", &start, &end,
                                         err, sizeof err), ENOENT);
}

static void test_indirect_function_is_rejected(void **state)
{
    (void)state;
    uintptr_t start, end;
    assert_int_equal(sym_ifunc(), 7);
    assert_int_equal(dm_symbols_function(NULL, "sym_ifunc", &start, &end, err, sizeof err),
                     EINVAL);
    assert_err_has("indirect function");
}

/* ---- concurrency -------------------------------------------------------- */

static void *lookup_many(void *arg)
{
    (void)arg;
    char e[ERR_LEN];
    for (int i = 0; i < N_LOOKUPS; i++) {
        uintptr_t a = 0, b = 0;
        if (dm_symbols_find(NULL, "sym_b.c:cache_lock", 0, MUTEX_SIZE, NULL, &a, e, sizeof e) ||
            dm_symbols_find("libsymlib.so", "symlib_lock", 0, MUTEX_SIZE, NULL, &b, e, sizeof e))
            return (void *)1;
        if (a != (uintptr_t)sym_b_cache_lock() || b != (uintptr_t)symlib_lock_addr())
            return (void *)1;
        if (i % 100 == 0)
            dm_symbols_flush();
    }
    return NULL;
}

static void test_lookups_from_many_threads_agree(void **state)
{
    (void)state;
    pthread_t t[N_THREADS];
    for (int i = 0; i < N_THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, lookup_many, NULL), 0);
    for (int i = 0; i < N_THREADS; i++) {
        void *r;
        assert_int_equal(pthread_join(t[i], &r), 0);
        assert_null(r);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_global_mutex_resolves_to_its_address, teardown),
        cmocka_unit_test_teardown(test_executable_found_by_its_file_name_and_full_path, teardown),
        cmocka_unit_test_teardown(test_static_in_two_files_is_ambiguous_and_lists_both, teardown),
        cmocka_unit_test_teardown(test_file_qualified_static_resolves_each_file, teardown),
        cmocka_unit_test_teardown(test_file_qualified_static_accepts_the_source_path, teardown),
        cmocka_unit_test_teardown(test_unique_static_needs_no_file_name, teardown),
        cmocka_unit_test_teardown(test_function_scope_static_answers_to_its_source_name, teardown),
        cmocka_unit_test_teardown(test_file_qualified_global_is_enoent_with_a_hint, teardown),
        cmocka_unit_test_teardown(test_static_of_another_file_is_enoent, teardown),
        cmocka_unit_test_teardown(test_struct_member_at_offset, teardown),
        cmocka_unit_test_teardown(test_array_element_at_index_times_size, teardown),
        cmocka_unit_test_teardown(test_offset_past_the_end_is_erange, teardown),
        cmocka_unit_test_teardown(test_negative_offset_is_einval, teardown),
        cmocka_unit_test_teardown(test_too_small_object_is_erange_and_gives_both_sizes, teardown),
        cmocka_unit_test_teardown(test_sizeless_symbol_is_einval, teardown),
        cmocka_unit_test_teardown(test_what_does_not_fit_is_named_as_the_caller_says, teardown),
        cmocka_unit_test_teardown(test_missing_symbol_is_enoent_and_names_the_object, teardown),
        cmocka_unit_test_teardown(test_unloaded_object_is_enoent, teardown),
        cmocka_unit_test_teardown(test_thread_local_is_einval, teardown),
        cmocka_unit_test_teardown(test_function_is_not_a_data_object, teardown),
        cmocka_unit_test_teardown(test_empty_symbol_is_einval, teardown),
        cmocka_unit_test_teardown(test_error_is_truncated_to_the_buffer, teardown),
        cmocka_unit_test_teardown(test_cxx_std_mutex_global_is_found_by_its_name, teardown),
        cmocka_unit_test_teardown(test_cxx_namespaced_mutex_is_found_by_its_mangled_name, teardown),
        cmocka_unit_test_teardown(test_library_linked_at_start_global_and_static, teardown),
        cmocka_unit_test_teardown(test_library_found_by_full_path, teardown),
        cmocka_unit_test_teardown(test_library_symbol_is_not_in_the_executable, teardown),
        cmocka_unit_test_teardown(test_library_global_moved_by_copy_relocation_resolves_to_live_copy, teardown),
        cmocka_unit_test_teardown(test_dlopened_library_global_and_static, teardown),
        cmocka_unit_test_teardown(test_qualified_static_without_file_names_says_why, teardown),
        cmocka_unit_test_teardown(test_unloaded_after_dlclose_is_enoent, teardown),
        cmocka_unit_test_teardown(test_where_names_the_global_and_the_element_of_an_array, teardown),
        cmocka_unit_test_teardown(test_where_outside_every_object_is_enoent, teardown),
        cmocka_unit_test_teardown(test_address_of_this_build_resolves_and_another_build_is_estale,
                                  teardown),
        cmocka_unit_test_teardown(test_address_in_the_wrong_kind_of_segment_is_einval, teardown),
        cmocka_unit_test_teardown(test_object_given_without_version_matches_versioned_file, teardown),
        cmocka_unit_test_teardown(test_two_loaded_files_of_one_name_are_ambiguous, teardown),
        cmocka_unit_test_teardown(test_cached_table_answers_after_the_file_is_gone, teardown),
        cmocka_unit_test_teardown(test_function_range_contains_the_function, teardown),
        cmocka_unit_test_teardown(test_function_in_library_range, teardown),
        cmocka_unit_test_teardown(test_function_lookup_rejects_data, teardown),
        cmocka_unit_test_teardown(test_indirect_function_is_rejected, teardown),
        cmocka_unit_test_teardown(test_lookups_from_many_threads_agree, teardown),
    };
    return cmocka_run_group_tests(tests, th_group_setup, th_group_teardown);
}
