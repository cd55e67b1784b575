/* elfsyms: one ELF file's sections and symbol table through libelf; see
 * elfsyms.h. Owns how a symbol table is walked (which table, which entries
 * count as symbols, which STT_FILE a local belongs to); must not know what
 * the symbols are wanted for, nor keep anything between calls. */
#include "elfsyms.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum dm_elf_open_result dm_elf_open(struct dm_elf *e, const char *path)
{
    e->elf = NULL;
    e->err = 0;
    e->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (e->fd < 0) {
        e->err = errno;
        return DM_ELF_SYSTEM;
    }
    struct stat st;
    if (fstat(e->fd, &st) == 0 && !S_ISREG(st.st_mode)) {
        if (!S_ISDIR(st.st_mode))
            return DM_ELF_NOT_REGULAR;
        e->err = EISDIR;
        return DM_ELF_SYSTEM;
    }
    e->elf = elf_begin(e->fd, ELF_C_READ_MMAP, NULL);
    if (!e->elf)
        return DM_ELF_LIBELF;
    return elf_kind(e->elf) == ELF_K_ELF ? DM_ELF_OPENED : DM_ELF_NOT_ELF;
}

void dm_elf_close(struct dm_elf *e)
{
    if (e->elf)
        elf_end(e->elf);
    if (e->fd >= 0)
        close(e->fd);
    e->elf = NULL;
    e->fd = -1;
}

Elf_Scn *dm_elf_section(Elf *elf, GElf_Word type, GElf_Shdr *shdr)
{
    Elf_Scn *scn = NULL;
    while ((scn = elf_nextscn(elf, scn)) != NULL)
        if (gelf_getshdr(scn, shdr) && shdr->sh_type == type)
            return scn;
    return NULL;
}

int dm_elf_syms_begin(Elf *elf, struct dm_elf_syms *w)
{
    memset(w, 0, sizeof *w);
    GElf_Shdr shdr;
    Elf_Scn *scn = dm_elf_section(elf, SHT_SYMTAB, &shdr);
    w->section = ".symtab";
    if (!scn) {
        scn = dm_elf_section(elf, SHT_DYNSYM, &shdr);
        w->section = ".dynsym";
    }
    if (!scn)
        return ENOENT;
    Elf_Scn *strscn = elf_getscn(elf, shdr.sh_link);
    Elf_Data *strdata = strscn ? elf_getdata(strscn, NULL) : NULL;
    w->data = elf_getdata(scn, NULL);
    if (!strdata || !w->data || shdr.sh_entsize == 0)
        return EIO;
    w->strings = strdata->d_buf;
    w->strsize = strdata->d_size;
    w->count = shdr.sh_size / shdr.sh_entsize;
    w->next = 1;                /* entry 0 is the null symbol */
    return 0;
}

int dm_elf_syms_next(struct dm_elf_syms *w, struct dm_elf_sym *out)
{
    while (w->next < w->count) {
        GElf_Sym s;
        if (!gelf_getsym(w->data, (int)w->next++, &s) || s.st_name >= w->strsize ||
            !memchr(w->strings + s.st_name, '\0', w->strsize - s.st_name))
            continue;           /* a name outside its string table */
        const char *name = w->strings + s.st_name;
        int type = GELF_ST_TYPE(s.st_info);
        if (type == STT_FILE) {
            w->file = *name ? name : NULL;
            w->has_files = 1;
            continue;
        }
        if (s.st_shndx == SHN_UNDEF || !*name || type == STT_SECTION)
            continue;
        *out = (struct dm_elf_sym){
            .name = name,
            .file = GELF_ST_BIND(s.st_info) == STB_LOCAL ? w->file : NULL,
            .value = s.st_value, .size = s.st_size, .info = s.st_info,
            .other = s.st_other, .shndx = s.st_shndx,
        };
        return 1;
    }
    return 0;
}
