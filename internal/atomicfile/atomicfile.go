// Package atomicfile writes files whole or not at all.
package atomicfile

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// TempPrefix starts the name of the temporary file Write writes before
// renaming it into place, so that a directory listing can skip it.
const TempPrefix = ".tmp-"

// Write writes data to file with mode: it writes a temporary file in the
// same directory, syncs it and renames it into place, so a reader never
// sees half a file and a failed write leaves any previous file as it was
// (the temporary file is removed).
func Write(file string, data []byte, mode fs.FileMode) (err error) {
	f, err := os.CreateTemp(filepath.Dir(file), TempPrefix+strings.ReplaceAll(filepath.Base(file), "*", "")+"-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Chmod(mode); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), file)
}
