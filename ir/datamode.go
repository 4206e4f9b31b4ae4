package ir

import "fmt"

// DataMode is how a job's tensor data may be handled (spec §0): in the
// confidential and regulated modes no tensor is filled with a debug
// pattern and no loss appears in logs or metrics.
type DataMode string

// Data modes; the empty mode is standard.
const (
	DataStandard     DataMode = "standard"
	DataConfidential DataMode = "confidential"
	DataRegulated    DataMode = "regulated"
)

// Check returns an error naming the modes unless m is one of them or
// empty.
func (m DataMode) Check() error {
	switch m {
	case "", DataStandard, DataConfidential, DataRegulated:
		return nil
	}
	return fmt.Errorf("data mode %q: want %s, %s or %s", string(m), DataStandard, DataConfidential, DataRegulated)
}

// Sensitive reports whether m keeps data out of sight: confidential or
// regulated.
func (m DataMode) Sensitive() bool { return m == DataConfidential || m == DataRegulated }
