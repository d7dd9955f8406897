package codegen

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/runtime"
)

// BufferRow is one buffer of the plan: its type, where its storage lives
// and its size at the report's batch, so that a mixed-precision model's
// 16-bit buffers can be seen beside its f32 ones.
type BufferRow struct {
	Name  string `json:"name"`
	Role  string `json:"role"`
	DType string `json:"dtype"`
	// Elems is the element count as the plan sizes it ("784*B").
	Elems string `json:"elems"`
	// Placement is arena (reused by liveness), persistent, or "alias of"
	// the buffer it views.
	Placement string `json:"placement"`
	Bytes     int64  `json:"bytes"`
}

// precisionReport fills the report's buffers and, under mixed precision,
// the policy and the f32 plan's peak to compare with (Program.F32).
func (r *Report) precisionReport(p *compiler.Program, plan *runtime.Plan) {
	env := map[string]int{"B": p.RefBatch}
	for i, b := range plan.Buffers {
		row := BufferRow{Name: b.Name, Role: b.Role, DType: b.DType.String(), Elems: b.Elems.String(), Bytes: b.Elems.Eval(env) * int64(b.DType.Size())}
		if row.Name == "" {
			row.Name = fmt.Sprintf("#%d", i)
		}
		switch b.Placement {
		case runtime.Arena:
			row.Placement = "arena"
		case runtime.Persistent:
			row.Placement = "persistent"
		case runtime.Alias:
			row.Placement = "alias of " + plan.Buffers[b.AliasOf].Name
		}
		r.Buffers = append(r.Buffers, row)
	}
	if pr := p.Model.Precision; pr != nil {
		r.Precision = pr.Type.String() + " (" + pr.SetBy()
		if pr.Scaler != nil {
			r.Precision += fmt.Sprintf(", dynamic loss scaling from %g", pr.Scaler.Init)
		}
		r.Precision += ")"
	}
	if p.F32 != nil {
		r.F32PeakBytes = p.F32.PeakBytes
	}
}

// writeBuffers prints every buffer's type and size, the bytes each dtype
// holds, and under mixed precision the planned peak against the f32
// plan's.
func (r *Report) writeBuffers(w io.Writer) error {
	fmt.Fprintf(w, "\nbuffers at batch %d:\n", r.Batch)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tname\trole\tdtype\telements\tbytes\tplacement")
	byType := map[string]int64{}
	for i, b := range r.Buffers {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\n", i, b.Name, b.Role, b.DType, b.Elems, b.Bytes, b.Placement)
		if !strings.HasPrefix(b.Placement, "alias") {
			byType[b.DType] += b.Bytes
		}
	}
	tw.Flush()
	var types []string
	for t := range byType {
		types = append(types, t)
	}
	sort.Strings(types)
	var parts []string
	for _, t := range types {
		parts = append(parts, fmt.Sprintf("%s %d", t, byType[t]))
	}
	// Arena buffers share storage by liveness, so these sums exceed the
	// planned peak: they say which types the bytes are in, not how many
	// are allocated.
	if _, err := fmt.Fprintf(w, "buffer bytes by dtype (before arena reuse): %s\n", strings.Join(parts, ", ")); err != nil {
		return err
	}
	if r.Precision == "" {
		return nil
	}
	_, err := fmt.Fprintf(w, "mixed precision %s: planned peak memory %d bytes, the f32 plan's %d: %s\n",
		r.Precision, r.PeakBytes, r.F32PeakBytes, saving(r.F32PeakBytes, r.PeakBytes))
	return err
}

// saving says how much smaller amp is than f32, or how much larger.
func saving(f32, amp int64) string {
	if f32 <= 0 {
		return "no f32 plan"
	}
	d := f32 - amp
	if d >= 0 {
		return fmt.Sprintf("saves %d bytes (%.1f%%)", d, 100*float64(d)/float64(f32))
	}
	return fmt.Sprintf("costs %d bytes more (%.1f%%)", -d, -100*float64(d)/float64(f32))
}
