package main

func runImportTorch(e *env, args []string) error {
	return usagef("import torch: not built yet")
}
