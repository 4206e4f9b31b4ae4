// Package viz draws a plan's memory timeline: time (executed positions)
// across, byte offset up, one box per storage, coloured by arena, one
// panel per arena with its own scale and a dashed line at its lower bound.
// The x axis has ticks at round positions and, when the graph is known
// (Options.Phases), the forward, backward and optimizer phases of the
// step as a band under each panel and a line at each change of phase.
// Persistent arenas (parameters, optimizer state: every tensor lives the
// whole step) are folded into a short panel. SVG gives the picture with
// labels on boxes wide enough to hold them and a tooltip (id, size,
// offset, lifetime) on every box; HTML wraps the same SVG with a legend
// and a line that follows the pointer.
package viz

import (
	"fmt"
	"html"
	"io"
	"strings"

	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner"
)

// Options add what the plan alone does not say.
type Options struct {
	// Phases is the phase of each executed position (PhasesOf); nil
	// draws no phase markers.
	Phases []ir.Phase
}

// PhasesOf returns the phase of each executed position of g.
func PhasesOf(g *ir.Graph) []ir.Phase {
	out := make([]ir.Phase, len(g.Order))
	for i, n := range g.Order {
		out[i] = g.Nodes[n].Phase
		if out[i] == "" {
			out[i] = ir.Forward
		}
	}
	return out
}

var phaseColors = map[ir.Phase]string{ir.Forward: "#9ecae1", ir.Backward: "#fdae6b", ir.Optimizer: "#a1d99b"}

// Geometry, in SVG user units.
const (
	width      = 1200.0
	leftMargin = 90.0
	rightPad   = 20.0
	panelH     = 260.0
	foldedH    = 60.0 // a persistent arena's panel
	panelGap   = 80.0
	topPad     = 50.0
	bandH      = 8.0 // the phase band under a panel
)

var arenaColors = map[string][2]string{ // fill, alternate fill
	"activations":     {"#4e79a7", "#7aa6d1"},
	"gradients":       {"#f28e2b", "#f7b26b"},
	"parameters":      {"#59a14f", "#8cd17d"},
	"optimizer_state": {"#b07aa1", "#d4a6c8"},
	"constants":       {"#9c9c9c", "#c4c4c4"},
}

func colors(arena string) [2]string {
	if c, ok := arenaColors[arena]; ok {
		return c
	}
	return [2]string{"#76b7b2", "#a5d6d2"}
}

// SVG writes the timeline of p as a standalone SVG document.
func SVG(w io.Writer, p *planner.Plan, o Options) error {
	var b strings.Builder
	writeSVG(&b, p, o)
	_, err := io.WriteString(w, b.String())
	return err
}

// folded reports whether arena a is drawn as a short panel.
func folded(a planner.ArenaPlan) bool { return a.Role == planner.PersistentArena }

func panelHeight(a planner.ArenaPlan) float64 {
	if folded(a) {
		return foldedH
	}
	return panelH
}

func writeSVG(b *strings.Builder, p *planner.Plan, o Options) {
	h := topPad
	for _, a := range p.Arenas {
		h += panelHeight(a) + panelGap
	}
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="11">`+"\n", width, h, width, h)
	fmt.Fprintf(b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	name := p.Name
	if name == "" {
		name = "(unnamed)"
	}
	fmt.Fprintf(b, `<text x="%.0f" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", leftMargin, esc(fmt.Sprintf("%s — mode %s, strategy %s, %d tensors, %d positions", name, p.Mode, strategyName(p), len(p.Tensors), p.Positions)))
	fmt.Fprintf(b, `<text x="%.0f" y="38" fill="#555">%s</text>`+"\n", leftMargin, esc(fmt.Sprintf("peak %s, lower bound %s (%s); plan_hash %s",
		planner.FormatBytes(p.Metrics.PeakBytes), planner.FormatBytes(p.Metrics.LowerBoundBytes), overLB(p.Metrics.PeakBytes, p.Metrics.LowerBoundBytes), p.PlanHash.Short())))
	positions := max(p.Positions, 1)
	plotW := width - leftMargin - rightPad
	x := func(pos int32) float64 { return leftMargin + plotW*float64(pos)/float64(positions) }
	phases, xticks := phaseRuns(o.Phases, positions), ticks(positions)
	top := topPad + 30
	for ai, a := range p.Arenas {
		ph := panelHeight(a)
		scale := max(a.PeakBytes, a.LowerBoundBytes, 1)
		y := func(off uint64) float64 { return top + ph - ph*float64(off)/float64(scale) }
		fmt.Fprintf(b, `<g class="arena" data-arena="%s">`+"\n", esc(a.Name))
		title := fmt.Sprintf("%s (%s): peak %s, lower bound %s (%s), %d storages", a.Name, a.Role, planner.FormatBytes(a.PeakBytes), planner.FormatBytes(a.LowerBoundBytes), overLB(a.PeakBytes, a.LowerBoundBytes), a.Storages)
		if folded(a) {
			title += ", folded: every tensor lives the whole step"
		}
		fmt.Fprintf(b, `<text x="%.0f" y="%.1f" font-size="13" font-weight="bold">%s</text>`+"\n", leftMargin, top-8, esc(title))
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#f7f7f7" stroke="#999"/>`+"\n", leftMargin, top, plotW, ph)
		// Offsets at 0, half and peak (0 and peak when folded).
		for _, f := range []float64{0, 0.5, 1} {
			if folded(a) && f == 0.5 {
				continue
			}
			off := uint64(f * float64(scale))
			fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end" fill="#555">%s</text>`+"\n", leftMargin-6, y(off)+4, esc(planner.FormatBytes(off)))
		}
		fill := colors(a.Name)
		n := 0
		for _, t := range p.Tensors {
			if t.Arena != a.Name || t.Storage != "" {
				continue
			}
			x0, x1 := x(t.Lifetime[0]), x(t.Lifetime[1]+1)
			y0, y1 := y(t.Offset+t.Size), y(t.Offset)
			tip := fmt.Sprintf("%s: %s (%d bytes) at offset %d, live [%d, %d]", t.ID, planner.FormatBytes(t.Size), t.Size, t.Offset, t.Lifetime[0], t.Lifetime[1])
			fmt.Fprintf(b, `<rect x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="%s" stroke="white" stroke-width="0.4" data-tip="%s"><title>%s</title></rect>`+"\n",
				x0, y0, max(x1-x0, 0.3), max(y1-y0, 0.3), fill[n%2], esc(tip), esc(tip))
			if !folded(a) && x1-x0 > 7*float64(len(t.ID))+6 && y1-y0 > 13 {
				fmt.Fprintf(b, `<text x="%.1f" y="%.1f" fill="white" font-size="10" pointer-events="none">%s</text>`+"\n", x0+3, y0+11, esc(t.ID))
			}
			n++
		}
		if a.LowerBoundBytes > 0 && !folded(a) {
			fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%.2f" y2="%.2f" stroke="#d62728" stroke-dasharray="6 4"/>`+"\n", leftMargin, leftMargin+plotW, y(a.LowerBoundBytes), y(a.LowerBoundBytes))
			fmt.Fprintf(b, `<text x="%.1f" y="%.2f" text-anchor="end" fill="#d62728">lower bound</text>`+"\n", leftMargin+plotW-4, y(a.LowerBoundBytes)-4)
		}
		bottom := top + ph
		// The phases: a band under the panel, a line at each change.
		for k, r := range phases {
			fmt.Fprintf(b, `<rect x="%.2f" y="%.1f" width="%.2f" height="%.1f" fill="%s"><title>%s</title></rect>`+"\n", x(r.from), bottom+1, max(x(r.to)-x(r.from), 0.3), bandH, phaseColors[r.phase], esc(fmt.Sprintf("%s: positions %d to %d", r.phase, r.from, r.to-1)))
			if x(r.to)-x(r.from) > 7*float64(len(r.phase))+4 {
				fmt.Fprintf(b, `<text x="%.1f" y="%.1f" fill="#333" font-size="9">%s</text>`+"\n", x(r.from)+2, bottom+bandH, esc(string(r.phase)))
			}
			if k > 0 {
				fmt.Fprintf(b, `<line x1="%.2f" x2="%.2f" y1="%.1f" y2="%.1f" stroke="#555" stroke-dasharray="2 3"/>`+"\n", x(r.from), x(r.from), top, bottom)
			}
		}
		if len(phases) > 0 {
			bottom += bandH + 1
		}
		// Ticks at round positions.
		for _, t := range xticks {
			fmt.Fprintf(b, `<line x1="%.2f" x2="%.2f" y1="%.1f" y2="%.1f" stroke="#999"/>`+"\n", x(t), x(t), bottom, bottom+4)
			anchor := "middle"
			if t == int32(positions) {
				anchor = "end"
			}
			fmt.Fprintf(b, `<text x="%.2f" y="%.1f" text-anchor="%s" fill="#555">%d</text>`+"\n", x(t), bottom+15, anchor, t)
		}
		if ai == len(p.Arenas)-1 {
			fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end" fill="#555">position</text>`+"\n", leftMargin-6, bottom+15)
		}
		b.WriteString("</g>\n")
		top += ph + panelGap
	}
	b.WriteString("</svg>\n")
}

// phaseRun is positions [from, to) of one phase.
type phaseRun struct {
	phase    ir.Phase
	from, to int32
}

// phaseRuns groups consecutive positions of one phase; none when phases
// do not cover the positions.
func phaseRuns(phases []ir.Phase, positions int) []phaseRun {
	if len(phases) != positions {
		return nil
	}
	var out []phaseRun
	for i, ph := range phases {
		if len(out) > 0 && out[len(out)-1].phase == ph {
			out[len(out)-1].to = int32(i + 1)
			continue
		}
		out = append(out, phaseRun{ph, int32(i), int32(i + 1)})
	}
	return out
}

// ticks returns 0, the end, and the multiples of a round step (1, 2 or 5
// times a power of ten) that give about ten ticks in between.
func ticks(positions int) []int32 {
	var step int
	for k := 1; ; k *= 10 {
		if step = k; positions/step <= 10 {
			break
		}
		if step = 2 * k; positions/step <= 10 {
			break
		}
		if step = 5 * k; positions/step <= 10 {
			break
		}
	}
	var out []int32
	for t := 0; t < positions; t += step {
		if positions-t >= step/2 || t == 0 {
			out = append(out, int32(t))
		}
	}
	return append(out, int32(positions))
}

// HTML writes an HTML page holding the SVG, a legend and a line that shows
// the box under the pointer.
func HTML(w io.Writer, p *planner.Plan, o Options) error {
	var b strings.Builder
	title := p.Name
	if title == "" {
		title = "tmmu plan"
	}
	fmt.Fprintf(&b, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>%s — memory timeline</title>\n", esc(title))
	b.WriteString(`<style>
body { font-family: sans-serif; margin: 16px; }
#info { position: sticky; top: 0; background: #fffbe6; border: 1px solid #e6d98c; padding: 6px 10px; min-height: 1.2em; font-family: monospace; }
svg rect[data-tip]:hover { stroke: black; stroke-width: 1.5; }
.legend span { display: inline-block; margin-right: 14px; }
.legend i { display: inline-block; width: 12px; height: 12px; margin-right: 4px; vertical-align: middle; }
</style></head><body>
`)
	b.WriteString(`<div class="legend">`)
	for _, a := range p.Arenas {
		fmt.Fprintf(&b, `<span><i style="background:%s"></i>%s (%s)</span>`, colors(a.Name)[0], esc(a.Name), esc(string(a.Role)))
	}
	if len(phaseRuns(o.Phases, max(p.Positions, 1))) > 0 {
		for _, ph := range []ir.Phase{ir.Forward, ir.Backward, ir.Optimizer} {
			fmt.Fprintf(&b, `<span><i style="background:%s"></i>%s phase</span>`, phaseColors[ph], ph)
		}
	}
	b.WriteString("</div>\n<p id=\"info\">Point at a box: tensor id, size, offset and lifetime.</p>\n")
	writeSVG(&b, p, o)
	b.WriteString(`<script>
const info = document.getElementById("info");
document.querySelectorAll("svg rect[data-tip]").forEach(r => {
  r.addEventListener("mouseenter", () => { info.textContent = r.dataset.tip; });
});
</script>
</body></html>
`)
	_, err := io.WriteString(w, b.String())
	return err
}

func strategyName(p *planner.Plan) string {
	if p.Effort != "" {
		return string(p.Strategy) + " (" + string(p.Effort) + ")"
	}
	return string(p.Strategy)
}

func overLB(peak, lb uint64) string {
	if lb == 0 {
		return "-"
	}
	return fmt.Sprintf("%+.1f%% over it", 100*(float64(peak)/float64(lb)-1))
}

func esc(s string) string { return html.EscapeString(s) }
