//go:build cuda

package cuda

// #include <cuda.h>
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/ngen-ml/ngen/runtime"
)

// CUDA graphs (runtime.Grapher). Between BeginGraph and EndGraph the
// stream-ordered calls (launches, GEMMs, memsets, device copies) are
// recorded, not issued. EndGraph then either
//   - replays the key's graph, when the calls match the ones it was
//     captured from except for kernel argument values, which it writes
//     into the instantiated graph's nodes first (nodeUpdates counts
//     them); or
//   - issues the calls as usual (the first step at a batch size, which
//     also grows the GEMM scratch), then captures the same calls on the
//     stream into a graph for the next time.
//
// The key (runtime.Session's graphed) names the function, the symbol
// bindings and the state of each conditional step (runtime.StepCond:
// " clipping=on" or " clipping=off"). With gradient clipping off the
// session does not launch the grad-norm kernel, so a step has one launch
// fewer: the two states are two keys, each with its own graph, and
// toggling Session.SetClipNorm between steps replays the other graph
// rather than re-capturing. Were the calls of one key ever to change, the
// replay's match below fails and the key is captured again, so a stale
// graph never runs.
//
// A replay is one cuGraphLaunch instead of one driver call per step, and
// the GPU runs the nodes back to back. Any other call while recording (a
// host copy, Sync, Alloc, Free) issues what was recorded and gives up the
// graph for that key, so semantics never change; Free and a regrown GEMM
// scratch drop every graph, since graphs hold device addresses.

type callKind int

const (
	callLaunch callKind = iota
	callGemm
	callMemset
	callCopy
)

// streamCall is one stream-ordered device call.
type streamCall struct {
	kind        callKind
	fn          *function
	grid, block runtime.Dim3
	shared      int
	slots       []uint64 // kernel arguments, 8 bytes each (Launch)
	gemm        runtime.GemmArgs
	dst, src    runtime.Ptr
	value       byte
	bytes       int64
}

// sameShape is whether b can replay a's node: everything but kernel
// argument values agrees.
func (a *streamCall) sameShape(b *streamCall) bool {
	switch {
	case a.kind != b.kind:
		return false
	case a.kind == callLaunch:
		return a.fn == b.fn && a.grid == b.grid && a.block == b.block && a.shared == b.shared && len(a.slots) == len(b.slots)
	case a.kind == callGemm:
		return a.gemm == b.gemm
	}
	return a.dst == b.dst && a.src == b.src && a.value == b.value && a.bytes == b.bytes
}

// stepGraph is one captured sequence.
type stepGraph struct {
	cg    *cudaGraph
	calls []streamCall
	nodes []C.CUgraphNode // per call: a launch's kernel node, or nil
	name  string          // what errors name as the last kernel after a replay
}

type graphState struct {
	off     bool // Options.NoGraphs
	open    bool
	key     string
	pending []streamCall
	byKey   map[string]*stepGraph
	eager   map[string]bool // keys whose calls cannot be graphed
	// replays and captures count graph launches and captures, for tests;
	// nodeUpdates the kernel nodes a replay rewrote. A training step's
	// launches keep their arguments from step to step (the scalars that
	// change are in the device clock, runtime/clock.go), so a replayed
	// step updates none.
	replays, captures, nodeUpdates int
}

var _ runtime.Grapher = (*Device)(nil)

// BeginGraph starts recording the calls of one step (runtime.Grapher).
// With Options.NoGraphs, or while event timing is on, it does nothing.
//
// Recording needs no driver call, so it happens on the caller's goroutine
// under d.mu (which every use of d.gr holds, on either side of the device
// thread's channel): a step's launches and GEMMs cost no round trip to the
// device thread each, only EndGraph's launch does. Each such round trip
// wakes the locked OS thread and waits for it, several microseconds; a
// step of 20 to 200 calls paid it for every call before.
func (d *Device) BeginGraph(key string) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return errClosed
	}
	if d.gr.open {
		// The previous recording was never ended: do issues it first.
		d.mu.Unlock()
		return d.do(func() error { d.gr.begin(key, d.timer.on); return nil })
	}
	d.gr.begin(key, d.timer.on)
	d.mu.Unlock()
	return nil
}

// begin opens a recording for key, unless graphs are off, event timing is
// on, or key runs eagerly.
func (g *graphState) begin(key string, timing bool) {
	if g.off || timing || g.eager[key] {
		return
	}
	g.open, g.key, g.pending = true, key, g.pending[:0]
}

// EndGraph issues the recorded calls: a replay of key's graph, or the
// calls one by one followed by a capture (see the comment at the top).
// With capture false (the step failed on the host) it only issues what
// was recorded.
func (d *Device) EndGraph(capture bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errClosed
	}
	d.work <- func() error { return d.endGraph(capture) }
	return <-d.result
}

func (d *Device) endGraph(capture bool) error {
	g := &d.gr
	if !g.open {
		return nil
	}
	g.open = false
	calls := g.pending
	g.pending = nil
	if !capture {
		return d.issueAll(calls)
	}
	if sg := g.byKey[g.key]; sg != nil {
		ok, err := d.replay(sg, calls)
		if ok {
			return nil
		}
		delete(g.byKey, g.key)
		sg.cg.destroy()
		if err != nil {
			// The graph could not be updated or launched: run the
			// step call by call, and this key so from now on.
			g.markEager(g.key)
			return d.issueAll(calls)
		}
	}
	if err := d.issueAll(calls); err != nil {
		return err
	}
	sg, err := d.capture(calls)
	if err != nil {
		// The step ran; only its graph is lost. Run this key eagerly.
		g.markEager(g.key)
		return nil
	}
	if g.byKey == nil {
		g.byKey = map[string]*stepGraph{}
	}
	g.byKey[g.key] = sg
	g.captures++
	return nil
}

// replay launches sg for calls when they match it, updating the kernel
// nodes whose arguments changed. It reports false when they do not match.
func (d *Device) replay(sg *stepGraph, calls []streamCall) (bool, error) {
	if len(calls) != len(sg.calls) {
		return false, nil
	}
	for i := range calls {
		c, was := &calls[i], &sg.calls[i]
		if !was.sameShape(c) {
			return false, nil
		}
		if c.kind == callLaunch && !equalSlots(c.slots, was.slots) && sg.nodes[i] == nil {
			return false, nil
		}
	}
	for i := range calls {
		c, was := &calls[i], &sg.calls[i]
		if c.kind != callLaunch || equalSlots(c.slots, was.slots) {
			continue
		}
		if err := sg.cg.setKernel(sg.nodes[i], c.fn.fn, c.grid, c.block, c.shared, c.slots); err != nil {
			return false, fmt.Errorf("cuda: graph %s: updating %s: %v", d.gr.key, c.fn.info.Name, err)
		}
		was.slots = c.slots
		d.gr.nodeUpdates++
	}
	if err := sg.cg.launch(d.stream); err != nil {
		return false, fmt.Errorf("cuda: graph %s: %v", d.gr.key, err)
	}
	d.gr.replays++
	if sg.name == "" {
		sg.name = fmt.Sprintf("the CUDA graph of %s (%d calls; run with cuda.Options.NoGraphs to name the kernel)", d.gr.key, len(calls))
	}
	d.lastKernel = sg.name
	return true, nil
}

func equalSlots(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// capture records calls into a new graph without running them.
func (d *Device) capture(calls []streamCall) (*stepGraph, error) {
	if err := captureBegin(d.stream); err != nil {
		return nil, err
	}
	sg := &stepGraph{calls: calls, nodes: make([]C.CUgraphNode, len(calls))}
	var err error
	for i := range calls {
		if err = d.issue(&calls[i]); err != nil {
			break
		}
		if calls[i].kind == callLaunch {
			if sg.nodes[i], err = captureLast(d.stream); err != nil {
				break
			}
		}
	}
	cg, endErr := captureEnd(d.stream)
	if err == nil {
		err = endErr
	}
	if err != nil {
		if cg != nil {
			cg.destroy()
		}
		return nil, err
	}
	sg.cg = cg
	return sg, nil
}

// abandon issues what is being recorded and runs the key eagerly from now
// on: a call that cannot be recorded came in the middle of a step.
func (g *graphState) abandon(d *Device) error {
	if !g.open {
		return nil
	}
	g.markEager(g.key)
	g.open = false
	calls := g.pending
	g.pending = nil
	return d.issueAll(calls)
}

func (g *graphState) markEager(key string) {
	if g.eager == nil {
		g.eager = map[string]bool{}
	}
	g.eager[key] = true
}

// drop destroys every graph (their device addresses may be stale).
func (g *graphState) drop() error {
	var errs []error
	for k, sg := range g.byKey {
		errs = append(errs, sg.cg.destroy())
		delete(g.byKey, k)
	}
	return errors.Join(errs...)
}

// doCall runs one stream-ordered call: recorded while a graph is open
// (on the caller's goroutine, under d.mu: see BeginGraph), else issued on
// the device thread.
func (d *Device) doCall(c streamCall) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errClosed
	}
	if d.gr.open {
		d.gr.pending = append(d.gr.pending, c)
		return nil
	}
	d.work <- func() error { return d.issueTimed(&c) }
	return <-d.result
}

func (d *Device) issueAll(calls []streamCall) error {
	for i := range calls {
		if err := d.issueTimed(&calls[i]); err != nil {
			return err
		}
	}
	return nil
}

// issueTimed issues c, between timing events when it is a launch or GEMM
// and event timing is on.
func (d *Device) issueTimed(c *streamCall) error {
	switch c.kind {
	case callLaunch:
		return d.timer.around(d.stream, c.fn.info.Name, func() error { return d.issue(c) })
	case callGemm:
		return d.timer.around(d.stream, "gemm", func() error { return d.issue(c) })
	}
	return d.issue(c)
}

// issue enqueues c on the stream, on the device thread.
func (d *Device) issue(c *streamCall) error {
	switch c.kind {
	case callLaunch:
		kernelParams := make([]unsafe.Pointer, len(c.slots))
		for i := range c.slots {
			kernelParams[i] = unsafe.Pointer(&c.slots[i])
		}
		if err := c.fn.fn.Launch(c.grid.X, c.grid.Y, c.grid.Z, c.block.X, c.block.Y, c.block.Z, c.shared, d.stream, kernelParams); err != nil {
			return fmt.Errorf("cuda: launch %s (grid %v, block %v, %d shared bytes): %v", c.fn.info.Name, c.grid, c.block, c.shared, err)
		}
		d.lastKernel = c.fn.info.Name
		return nil
	case callGemm:
		return d.gemmLowered(c.gemm)
	case callMemset:
		if err := cu.MemsetD8Async(cu.DevicePtr(c.dst), c.value, c.bytes, d.stream); err != nil {
			return fmt.Errorf("cuda: memset of %d bytes at %#x: %v", c.bytes, uintptr(c.dst), err)
		}
		return nil
	case callCopy:
		return d.copyDtoD(c.dst, c.src, c.bytes)
	}
	return fmt.Errorf("cuda: unknown call kind %d", c.kind)
}
