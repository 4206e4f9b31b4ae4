package main

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

var completionCmd = &command{
	name:    "completion",
	summary: "Print a shell completion script (bash or zsh): commands, their subcommands and models, flags (read from each command's --help) and file names.",
	usage:   "completion bash|zsh",
	run:     runCompletion,
}

func runCompletion(c *command, e *env, args []string) error {
	fs := newFlags(e, c)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || pos[0] != "bash" && pos[0] != "zsh" {
		return usagef("usage: tmmu %s (source <(tmmu completion bash), or in zsh: source <(tmmu completion zsh))", c.usage)
	}
	if pos[0] == "zsh" {
		// zsh runs bash completion functions through bashcompinit.
		fmt.Fprintln(e.stdout, "autoload -U +X bashcompinit && bashcompinit")
	}
	fmt.Fprint(e.stdout, bashCompletion())
	return nil
}

// subcommandWord is a literal second word in a usage line ("job submit"),
// not a placeholder (IR, MODEL) or a flag.
var subcommandWord = regexp.MustCompile(`^[a-z][a-z-]*$`)

// subcommands returns, by command, the words that may follow it: the
// literal second words of its usage lines, and the models of tmmu gen.
func subcommands() map[string][]string {
	out := map[string][]string{"gen": genModelNames(), "help": nil}
	for _, c := range commands {
		out["help"] = append(out["help"], c.name)
		for _, line := range strings.Split(c.usage, "\n") {
			f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "tmmu "))
			if len(f) > 1 && f[0] == c.name && subcommandWord.MatchString(f[1]) && !slices.Contains(out[c.name], f[1]) {
				out[c.name] = append(out[c.name], f[1])
			}
		}
	}
	return out
}

// bashCompletion is the bash completion script: the command names and
// subcommands are written in; flags are asked of "tmmu CMD [SUB] --help"
// when a word starts with a dash, so they are always the binary's own.
func bashCompletion() string {
	subs := subcommands()
	names := subs["help"] // every command
	var cases strings.Builder
	for _, name := range append(slices.Clone(names), "help") {
		if len(subs[name]) > 0 {
			fmt.Fprintf(&cases, "    %s) subs=%q ;;\n", name, strings.Join(subs[name], " "))
		}
	}
	return `# tmmu bash completion: source <(tmmu completion bash)
_tmmu() {
  local cur=${COMP_WORDS[COMP_CWORD]} cmd=${COMP_WORDS[1]} subs=""
  if [ "$COMP_CWORD" -eq 1 ]; then
    COMPREPLY=($(compgen -W "` + strings.Join(names, " ") + ` help" -- "$cur"))
    return
  fi
  case "$cmd" in
` + cases.String() + `  esac
  if [ "$COMP_CWORD" -eq 2 ] && [ -n "$subs" ] && [[ "$cur" != -* ]]; then
    COMPREPLY=($(compgen -W "$subs" -- "$cur"))
    return
  fi
  if [[ "$cur" == -* ]]; then
    local words=("$cmd")
    if [ -n "$subs" ] && [[ "${COMP_WORDS[2]}" != -* ]]; then words+=("${COMP_WORDS[2]}"); fi
    COMPREPLY=($(compgen -W "$("${COMP_WORDS[0]}" "${words[@]}" --help 2>&1 | sed -n 's/^  \(-[a-z0-9-]*\).*/-\1/p')" -- "$cur"))
    return
  fi
  COMPREPLY=($(compgen -f -- "$cur"))
}
complete -o filenames -F _tmmu tmmu
`
}
