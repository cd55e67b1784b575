# md2man.awk: the Markdown of config/REFERENCE.md (and of the tables
# `dmutex config-keys` prints) as man(7) source, so that dmutex.conf(5) is
# made from the reference instead of being a second copy of it
# (tools/mkman.sh). Only what those files use is understood:
#
#   ## H, ### H            .SH H, .SS H ("# title" lines are dropped)
#   paragraphs             .PP, filled
#   - item (2-space cont.) .IP \(bu
#   ``` ... ```            .nf block, indented
#   | a | b | c |          one .TP per row: the first cell is the tag, the
#                          middle cells "header: value", the last cell (when
#                          its header is "meaning" or empty) the text
#   `code`, **bold**       \fB...\fR;  [text](url): text (url when absolute)
#   <!-- ... -->           dropped
#
# With -v keys=DIR, the lines between "<!-- config-keys GROUP:" and
# "<!-- end config-keys -->" are replaced by the table in DIR/GROUP (the
# output of `dmutex config-keys GROUP`), so a key added to the code appears
# in the page even before the reference is updated. -v from=HEADING starts
# the output at that "## HEADING", -v until=HEADING stops it before that one.

function esc(t) {
    gsub(/\\/, "\\e", t)
    gsub(/-/, "\\-", t)
    return t
}

# Code spans and bold as \fB (a code span inside bold stays bold), links
# as their text.
function inline(s,    out, i, n, c, code, bold, m, k, url) {
    out = ""
    n = length(s)
    for (i = 1; i <= n; i++) {
        c = substr(s, i, 1)
        if (c == "`") {
            code = !code
            if (!bold)
                out = out (code ? "\\fB" : "\\fR")
            if (code)
                out = out "\\%"      # not hyphenated
        } else if (!code && substr(s, i, 2) == "**") {
            bold = !bold
            if (!code)
                out = out (bold ? "\\fB" : "\\fR")
            i++
        } else if (!code && c == "[" && match(substr(s, i), /^\[[^]]*\]\([^)]*\)/)) {
            m = substr(s, i, RLENGTH)
            k = index(m, "](")
            out = out inline(substr(m, 2, k - 2))
            url = substr(m, k + 2, length(m) - k - 2)
            if (url ~ /^https?:/)
                out = out " <" esc(url) ">"
            i += length(m) - 1
        } else {
            out = out esc(c)
        }
    }
    return out (code || bold ? "\\fR" : "")
}

# A text line as roff: a leading . or ' would be a request.
function line(t) {
    if (t ~ /^[.']/)
        t = "\\&" t
    print t
}

function cells(row, arr,    n, i) {
    sub(/^[ \t]*\|/, "", row)
    sub(/\|[ \t]*$/, "", row)
    n = split(row, arr, "|")
    for (i = 1; i <= n; i++) {
        sub(/^[ \t]+/, "", arr[i])
        sub(/[ \t]+$/, "", arr[i])
    }
    return n
}

# A Markdown table (rows[1] the header, rows[2] the |---| line).
function table(nrows,    h, nh, c, nc, r, i, fields, last) {
    nh = cells(rows[1], h)
    for (r = 3; r <= nrows; r++) {
        nc = cells(rows[r], c)
        print ".TP"
        line(inline(c[1]))
        last = (h[nh] == "meaning" || h[nh] == "") ? nh : nh + 1
        fields = ""
        for (i = 2; i < last && i <= nc; i++)
            if (c[i] != "")
                fields = fields (fields == "" ? "" : "; ") (h[i] == "" ? "" : h[i] ": ") c[i]
        if (fields != "") {
            line(inline(fields) (last <= nc && c[last] != "" ? "." : ""))
            if (last <= nc && c[last] != "")
                print ".br"
        }
        if (last <= nc && c[last] != "")
            line(inline(c[last]))
    }
}

function flush_table() {
    if (ntable > 0)
        table(ntable)
    ntable = 0
}

function keys_table(group,    f, l) {
    f = keys "/" group
    ntable = 0
    while ((getline l < f) > 0)
        rows[++ntable] = l
    close(f)
    if (ntable < 2) {
        print "md2man.awk: no key table in " f > "/dev/stderr"
        failed = 1
    }
    flush_table()
}

BEGIN { on = (from == ""); ntable = 0; para = 0; incode = 0; skipping = 0 }

{
    if (!on) {
        if ($0 == "## " from)
            on = 1
        else
            next
    }
    if (incode) {
        if ($0 ~ /^```/) {
            print ".fi"
            print ".RE"
            incode = 0
        } else {
            line(esc($0))
        }
        next
    }
    if (skipping) {
        if (index($0, "<!-- end config-keys -->") == 1)
            skipping = 0
        next
    }
    if (keys != "" && index($0, "<!-- config-keys ") == 1) {
        flush_table()
        g = substr($0, 18)
        sub(/:.*/, "", g)
        keys_table(g)
        skipping = 1
        para = 0
        next
    }
    if ($0 ~ /^\|/) {
        rows[++ntable] = $0
        para = 0
        next
    }
    flush_table()
    if ($0 ~ /^<!--.*-->$/ || $0 ~ /^# /)
        next
    if ($0 ~ /^```/) {
        print ".PP"
        print ".RS 4"
        print ".nf"
        incode = 1
        para = 0
        next
    }
    if ($0 ~ /^## /) {
        if (until != "" && $0 == "## " until) {
            on = 0
            from = "\001"
            next
        }
        print ".SH " toupper(substr($0, 4))
        para = 0
        next
    }
    if ($0 ~ /^### /) {
        print ".SS " substr($0, 5)
        para = 0
        next
    }
    if ($0 ~ /^[ \t]*$/) {
        para = 0
        next
    }
    if ($0 ~ /^- /) {
        print ".IP \\(bu 2"
        line(inline(substr($0, 3)))
        para = 1
        next
    }
    if (!para) {
        print ".PP"
        para = 1
    }
    t = $0
    sub(/^[ \t]+/, "", t)
    line(inline(t))
}

END {
    flush_table()
    if (incode)
        print ".fi"
    exit failed
}
