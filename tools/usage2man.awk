# usage2man.awk: the text `dmutex COMMAND -h` prints, as man(7) source for
# that command's part of dmutex(1) (tools/mkman.sh), so that the page is
# made from the usage texts and cannot drift from them. The texts are
# plain: a "usage: " line, paragraphs at column 0, and indented lines that
# are either a list ("  TERM   description", with deeper-indented
# continuation lines, or a TERM alone on its line followed by deeper lines)
# or literal lines (examples), which are kept as they are. An indented
# "--option  text" line always starts an item (long options without a
# short one are indented further than the others).

function esc(t) {
    gsub(/\\/, "\\e", t)
    gsub(/-/, "\\-", t)
    return t
}

# Quoted `words` in bold.
function inline(t,    out, i, j) {
    t = esc(t)
    out = ""
    while ((i = index(t, "`")) > 0 && (j = index(substr(t, i + 1), "`")) > 0) {
        out = out substr(t, 1, i - 1) "\\fB" substr(t, i + 1, j - 1) "\\fR"
        t = substr(t, i + j + 1)
    }
    return out t
}

function line(t) {
    if (t ~ /^[.']/)
        t = "\\&" t
    print t
}

function indent(t) {
    match(t, /^ */)
    return RLENGTH
}

function end_literal() {
    if (literal) {
        print ".fi"
        print ".RE"
        literal = 0
    }
}

{ text[++n] = $0 }

END {
    state = ""     # "para", "item" (a .TP and its text), "" after a blank line
    for (k = 1; k <= n; k++) {
        t = text[k]
        if (k == 1 && t ~ /^[Uu]sage: /) {
            print ".PP"
            line("\\fB" esc(substr(t, 8)) "\\fR")
            state = ""
            continue
        }
        if (t ~ /^[ \t]*$/) {
            end_literal()
            state = ""
            continue
        }
        ind = indent(t)
        body = substr(t, ind + 1)
        if (ind == 0) {
            end_literal()
            if (state != "para")
                print ".PP"
            line(inline(body))
            state = "para"
            continue
        }
        # "      --long  text" under "  -s, --x  text": a new option, not
        # a continuation
        if (state == "item" && ind > item_ind && !(body ~ /^-/ && body ~ /[^ ]  +[^ ]/)) {
            sub(/^ +/, "", body)
            line(inline(body))
            continue
        }
        gap = match(body, /  +/)
        gs = RSTART
        gl = RLENGTH
        next_ind = k < n && text[k + 1] !~ /^[ \t]*$/ ? indent(text[k + 1]) : 0
        if (gap || next_ind > ind) {
            end_literal()
            print ".TP"
            if (gap) {
                line("\\fB" esc(substr(body, 1, gs - 1)) "\\fR")
                line(inline(substr(body, gs + gl)))
            } else {
                line("\\fB" esc(body) "\\fR")
            }
            item_ind = ind
            state = "item"
            continue
        }
        if (!literal) {
            print ".RS 4"
            print ".nf"
            literal = 1
        }
        line(esc(body))
        state = "literal"
    }
    end_literal()
}
