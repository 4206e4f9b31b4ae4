package main

var genCmd = &command{
	name:    "gen",
	summary: "Write a model graph (UML_Model_IR).",
	usage:   "gen MODEL [flags]",
	run:     func(c *command, e *env, args []string) error { return usagef("gen: not wired yet") },
}
