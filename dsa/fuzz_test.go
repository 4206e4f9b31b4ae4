package dsa_test

import (
	"errors"
	"testing"

	"github.com/tmmu/tmmu/dsa"
	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/planner"
	"github.com/tmmu/tmmu/planner/pack"
)

// FuzzParse: any file either fails to parse with ErrFormat, or parses to
// an instance whose graph compiles and whose packed plan verifies (or
// fails with a failure code, such as ALLOCATION_OVERFLOW for sizes that
// pass 2^64).
func FuzzParse(f *testing.F) {
	f.Add([]byte("id,lower,upper,size\na,0,2,8\nb,0,4,2\nc,2,4,4\nd,2,4,4\n"))
	f.Add([]byte("id,lower,upper,size\nx,-5,5,1\ny,5,6,18446744073709551615\n"))
	f.Add([]byte("id,lower,upper,size\n\"q,\",1,2,3\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := dsa.ParseBytes("fuzz.csv", data)
		if err != nil {
			return
		}
		if len(in.Buffers) > 200 {
			return
		}
		p, g, err := in.Plan(planner.Packed, pack.Fast)
		if err != nil {
			var fe *failure.Error
			if !errors.As(err, &fe) {
				t.Fatalf("plan failed without a failure code: %v", err)
			}
			return
		}
		if err := planner.Verify(g, p); err != nil {
			t.Fatalf("plan does not verify: %v", err)
		}
	})
}
