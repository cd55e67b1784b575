# bash completion for dmutex (installed as
# share/bash-completion/completions/dmutex). The commands and options are
# read from the command's own usage texts when completing, so they cannot
# drift from it: `dmutex help` lists the commands, `dmutex CMD -h` the
# options.
_dmutex() {
    local cur prev cmd words
    cur=${COMP_WORDS[COMP_CWORD]}
    prev=${COMP_WORDS[COMP_CWORD-1]}
    if [ "$COMP_CWORD" -eq 1 ]; then
        words=$("${COMP_WORDS[0]}" help 2>/dev/null |
            awk '/^commands:/ { on = 1; next } on && /^$/ { exit }
                 on && /^  [a-z-]/ { print $1 }')
        COMPREPLY=($(compgen -W "$words" -- "$cur"))
        return
    fi
    cmd=${COMP_WORDS[1]}
    case "$prev" in
        -c|--config|-o|--output) COMPREPLY=($(compgen -f -- "$cur")); return ;;
        -l|--log) COMPREPLY=($(compgen -W "error warn info debug" -- "$cur")); return ;;
        -r|--redis|-n|--namespace) return ;;
        -i|--interval|--top|--min-locks) return ;;     # numbers (trace)
        -d|--delay|-N|--iterations) return ;;          # numbers (top)
    esac
    if [[ "$cur" == -* ]]; then
        words=$("${COMP_WORDS[0]}" "$cmd" -h 2>/dev/null |
            grep -oE '^ +(-[A-Za-z], )?--?[A-Za-z][A-Za-z-]*' | tr -d ' ' | tr ',' '\n')
        COMPREPLY=($(compgen -W "$words" -- "$cur"))
        return
    fi
    COMPREPLY=($(compgen -f -- "$cur"))
}
complete -F _dmutex dmutex
