package viz

import (
	"bytes"
	"encoding/xml"
	"io"
	"strings"
	"testing"

	"github.com/tmmu/tmmu/internal/plantest"
	"github.com/tmmu/tmmu/models"
)

// TestSVG: the document is well-formed XML with one box per storage, each
// with a tooltip naming its tensor and size.
func TestSVG(t *testing.T) {
	m, err := models.MLP(models.DefaultMLPConfig())
	if err != nil {
		t.Fatal(err)
	}
	g, p := plantest.Verified(t, m)
	var buf bytes.Buffer
	if err := SVG(&buf, p, Options{Phases: PhasesOf(g)}); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(buf.Bytes()))
	boxes := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "rect" {
			for _, a := range se.Attr {
				if a.Name.Local == "data-tip" {
					boxes++
				}
			}
		}
	}
	if boxes != p.Metrics.Storages {
		t.Fatalf("%d boxes for %d storages", boxes, p.Metrics.Storages)
	}
	var h bytes.Buffer
	if err := HTML(&h, p, Options{Phases: PhasesOf(g)}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<!DOCTYPE html>", "<svg", "mouseenter", p.Tensors[0].ID} {
		if !strings.Contains(h.String(), want) {
			t.Errorf("HTML lacks %q", want)
		}
	}
}
