package transport

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/tmmu/tmmu/ir"
)

func TestSubjectsAndKeys(t *testing.T) {
	for _, c := range []struct {
		f    func(string) (string, error)
		want string
	}{
		{OutcomeSubject, "tmmu.job-1_A.outcome"},
		{ReplanSubject, "tmmu.job-1_A.replan"},
		{AnnounceSubject, "tmmu.job-1_A.announce"},
	} {
		if got, err := c.f("job-1_A"); err != nil || got != c.want {
			t.Errorf("got %q, %v; want %q", got, err, c.want)
		}
	}
	if k, err := ReportKey("job", 12, 3, "w"); err != nil || k != "job.12.3."+IdentityToken("w") || len(IdentityToken("w")) != tokenLen {
		t.Fatalf("ReportKey = %q, %v", k, err)
	}
	for _, bad := range []string{"", "a.b", "a b", "a*", ">", "jöb", "a/b", strings.Repeat("x", MaxJobLen+1)} {
		if err := ValidJob(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidJob(%q) = %v", bad, err)
		}
		if _, err := OutcomeSubject(bad); err == nil {
			t.Errorf("OutcomeSubject(%q) succeeded", bad)
		}
		if _, err := ReportKey(bad, 1, 1, "w"); err == nil {
			t.Errorf("ReportKey(%q) succeeded", bad)
		}
	}
	if err := ValidJob(strings.Repeat("x", MaxJobLen)); err != nil {
		t.Fatal(err)
	}
	for key, ok := range map[string]bool{"job.1.2.t": true, "job.01.2.t": false, "job.1.t": false, "job.1.2.3.t": false, "job.x.2.t": false, "job.1.-2.t": false} {
		if _, _, _, _, got := parseKey(key); got != ok {
			t.Errorf("parseKey(%q) ok = %v", key, got)
		}
	}
}

func TestValidate(t *testing.T) {
	h, g := hashOf("h"), hashOf("g")
	valid := []validator{
		PlanReport{Job: "j", Identity: "host-1/gpu0", PlanHash: h},
		Outcome{Job: "j", Agreed: true, StartStep: 5},
		Outcome{Job: "j", Reason: "aborted by operator"},
		Outcome{Job: "j", Missing: []uint64{0, 4}, Mismatches: []Mismatch{{Rank: 1, Expected: h, Got: g}, {Rank: 3, Got: g}}},
		StepReport{Job: "j", PlanHash: h, Identity: "w"},
		StepDone{Job: "j", Identity: "w"},
		ReplanRequest{Job: "j", Reason: "oom", DedupeID: "x", Identity: "w"},
		Announcement{Job: "j", Kind: KindAbort},
		Announcement{Job: "j", Kind: KindReplan, Reason: "rank 3 oom"},
	}
	for i, v := range valid {
		if err := v.Validate(); err != nil {
			t.Errorf("valid[%d] %T: %v", i, v, err)
		}
	}
	invalid := []validator{
		PlanReport{Identity: "x", PlanHash: h},
		PlanReport{Job: "j", PlanHash: h},
		PlanReport{Job: "j", Identity: "x"},
		PlanReport{Job: "j", Identity: "a\nb", PlanHash: h},
		PlanReport{Job: "j", Identity: "\xff", PlanHash: h},
		PlanReport{Job: "j", Identity: strings.Repeat("x", MaxIdentityLen+1), PlanHash: h},
		Outcome{Job: "j"},
		Outcome{Job: "j", Agreed: true, Missing: []uint64{1}},
		Outcome{Job: "j", Agreed: true, Mismatches: []Mismatch{{Rank: 1, Expected: h, Got: g}}},
		Outcome{Job: "j", Missing: []uint64{2, 1}},
		Outcome{Job: "j", Missing: []uint64{1, 1}},
		Outcome{Job: "j", Mismatches: []Mismatch{{Rank: 2, Expected: h, Got: g}, {Rank: 1, Expected: h, Got: g}}},
		Outcome{Job: "j", Mismatches: []Mismatch{{Rank: 1, Expected: h, Got: h}}},
		Outcome{Job: "j", Mismatches: []Mismatch{{Rank: 1, Expected: h}}},
		Outcome{Job: "j", Missing: []uint64{1}, Mismatches: []Mismatch{{Rank: 1, Expected: h, Got: g}}},
		StepReport{Job: "j"},
		StepReport{Job: "", PlanHash: h},
		StepDone{Job: "j", Nanos: -1},
		ReplanRequest{Job: "j", DedupeID: "x"},
		ReplanRequest{Job: "j", Reason: "oom"},
		Announcement{Job: "j", Kind: "pause"},
		Announcement{Job: "j"},
		Announcement{Job: "j", Kind: KindEpoch, Reason: strings.Repeat("x", MaxReasonLen+1)},
	}
	for i, v := range invalid {
		if err := v.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("invalid[%d] %T %+v: err = %v", i, v, v, err)
		}
		if _, err := Encode(v); !errors.Is(err, ErrInvalid) {
			t.Errorf("invalid[%d]: Encode err = %v", i, err)
		}
	}
}

func TestEncodeDecode(t *testing.T) {
	h, g := hashOf("h"), hashOf("g")
	values := []any{
		&PlanReport{Job: "j", Epoch: 1 << 40, Rank: 63, Identity: "w", PlanHash: h},
		&Outcome{Job: "j", Epoch: 2, Missing: []uint64{4}, Mismatches: []Mismatch{{Rank: 1, Expected: h, Got: g}}, Reason: "r"},
		&Outcome{Job: "j", Epoch: 2, Agreed: true, StartStep: 9},
		&StepReport{Job: "j", Epoch: 2, Rank: 1, Step: 3, PlanHash: h, Identity: "w1"},
		&StepDone{Job: "j", Epoch: 2, Rank: 1, Step: 3, Nanos: 42, Identity: "w1"},
		&ReplanRequest{Job: "j", Epoch: 2, Rank: 1, Step: 3, Reason: "oom", DedupeID: "d", Identity: "w1"},
		&Announcement{Job: "j", Epoch: 3, Kind: KindEpoch, StartStep: 4},
	}
	for _, v := range values {
		b1, err := Encode(v)
		if err != nil {
			t.Fatalf("%T: %v", v, err)
		}
		b2, _ := Encode(v)
		if string(b1) != string(b2) {
			t.Fatalf("%T: encoding not deterministic", v)
		}
		out := reflect.New(reflect.TypeOf(v).Elem())
		if err := Decode(b1, out.Interface()); err != nil {
			t.Fatalf("%T: %v", v, err)
		}
		if !reflect.DeepEqual(out.Interface(), v) {
			t.Fatalf("%T: round trip %+v != %+v", v, out.Interface(), v)
		}
		// JSON uses the same snake_case names and hex hashes.
		j, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(j), `"Job"`) || !strings.Contains(string(j), `"job":"j"`) {
			t.Fatalf("%T: JSON %s", v, j)
		}
	}
	// Hashes are 32-byte byte strings: 0x58 0x20.
	b, _ := Encode(StepReport{Job: "j", PlanHash: h, Identity: "w"})
	if !strings.Contains(string(b), "plan_hash\x58\x20"+string(h[:])) {
		t.Fatalf("hash not a 32-byte byte string: %x", b)
	}
	j, _ := json.Marshal(PlanReport{Job: "j", Identity: "w", PlanHash: h})
	if !strings.Contains(string(j), `"plan_hash":"`+h.String()+`"`) {
		t.Fatalf("JSON hash not hex: %s", j)
	}
	// Strict decoding: unknown fields, garbage and invalid values fail.
	extra, _ := ir.CanonicalCBOR(map[string]any{"job": "j", "kind": "abort", "epoch": 1, "start_step": 0, "colour": "red"})
	for name, data := range map[string][]byte{"unknown field": extra, "garbage": []byte{0xff, 0x00}, "empty": nil} {
		var a Announcement
		if err := Decode(data, &a); err == nil {
			t.Errorf("%s: decoded %+v", name, a)
		}
	}
	zero, _ := ir.CanonicalCBOR(PlanReport{Job: "j", Identity: "w"})
	var r PlanReport
	if err := Decode(zero, &r); !errors.Is(err, ErrInvalid) {
		t.Fatalf("zero hash decoded: %v", err)
	}
}
