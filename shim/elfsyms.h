/* elfsyms: reading one ELF file's symbol table with libelf, for the shim's
 * symbols module (names -> addresses in loaded objects) and for
 * `dmutex scan` (mutex variables of files on disk). Opens the file, finds
 * sections, and walks .symtab (or .dynsym when the file is stripped)
 * yielding each defined symbol with the source file (STT_FILE) of a local.
 * What a symbol means to its caller (data or function, which one of
 * several answers a name) is the caller's business. No cache, no state,
 * never prints. Callers call elf_version() once before using it. */
#ifndef DM_ELFSYMS_H
#define DM_ELFSYMS_H

#include <gelf.h>
#include <stddef.h>

/* One ELF file, open for reading. */
struct dm_elf {
    int fd;                     /* -1 when not open */
    Elf *elf;
    int err;                    /* DM_ELF_SYSTEM: the errno */
};

enum dm_elf_open_result {
    DM_ELF_OPENED,
    DM_ELF_SYSTEM,              /* open(2) failed, or a directory: errno in e->err */
    DM_ELF_NOT_REGULAR,         /* a device, a FIFO, ...: not a file to read */
    DM_ELF_NOT_ELF,             /* a file, but not an ELF file */
    DM_ELF_LIBELF,              /* libelf could not read it: elf_errmsg(-1) says why */
};

/* Opens `path` read-only (close-on-exec) and starts libelf on it (mmap).
 * Whatever the result, dm_elf_close(e) afterwards is right. */
enum dm_elf_open_result dm_elf_open(struct dm_elf *e, const char *path);
void dm_elf_close(struct dm_elf *e);

/* The first section of type `type` (SHT_SYMTAB, SHT_DYNAMIC, ...) with its
 * header in *shdr, or NULL. */
Elf_Scn *dm_elf_section(Elf *elf, GElf_Word type, GElf_Shdr *shdr);

/* A defined symbol as the walk yields it. `name` and `file` point into the
 * walk's string table (dm_elf_syms.strings), valid until the Elf ends. */
struct dm_elf_sym {
    const char *name;           /* never empty */
    const char *file;           /* a local's STT_FILE, if any; NULL for globals */
    GElf_Addr value;
    GElf_Xword size;
    unsigned char info;         /* bind and type, as in st_info */
    unsigned char other;        /* visibility */
    GElf_Section shndx;         /* never SHN_UNDEF; SHN_ABS: no load bias */
};

/* A walk over the symbol table of one file, in table order. */
struct dm_elf_syms {
    const char *section;        /* ".symtab", or ".dynsym" when there is none */
    const char *strings;        /* its string table, strsize bytes */
    size_t strsize;
    size_t count;               /* entries in the table: at most this many symbols */
    int has_files;              /* an STT_FILE was seen (strip -g removes them all) */
    Elf_Data *data;             /* private */
    size_t next;
    const char *file;
};

/* Starts a walk of .symtab, else .dynsym. 0; ENOENT when the file has
 * neither; EIO when the table cannot be read (elf_errmsg(-1)). */
int dm_elf_syms_begin(Elf *elf, struct dm_elf_syms *w);

/* The next defined, named symbol that is neither a section nor a file
 * symbol: 1 and *s, or 0 at the end of the table. */
int dm_elf_syms_next(struct dm_elf_syms *w, struct dm_elf_sym *s);

#endif
