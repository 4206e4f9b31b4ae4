package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBashCompletion sources the script in bash and completes: commands,
// subcommands, gen's models, and flags, which the script reads from
// "tmmu CMD --help" (here a shell function answering with this binary's
// help, run in-process).
func TestBashCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	script := mustRun(t, "", "completion", "bash")
	var help bytes.Buffer
	run(&env{stdin: strings.NewReader(""), stdout: &help, stderr: &help}, []string{"plan", "--help"})
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "plan-help.txt"), help.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	driver := script + `
tmmu() { cat "` + filepath.Join(dir, "plan-help.txt") + `"; }
complete_words() { COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); COMPREPLY=(); _tmmu; echo "${COMPREPLY[*]}"; }
complete_words tmmu pl
complete_words tmmu job s
complete_words tmmu gen gp
complete_words tmmu plan x.json --eff
complete_words tmmu help vi
`
	out, err := exec.Command(bash, "-c", driver).CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	want := []string{"plan", "submit", "gpt2", "--effort", "viz"}
	if len(got) != len(want) {
		t.Fatalf("completions %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("completion %d: %q, want %q", i, got[i], want[i])
		}
	}
	if zsh := mustRun(t, "", "completion", "zsh"); zsh != "autoload -U +X bashcompinit && bashcompinit\n"+script {
		t.Errorf("the zsh script is not bashcompinit and the bash script:\n%s", zsh)
	}
}
