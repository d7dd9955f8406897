package runtime

import "fmt"

// Stepped kernels (KernelInfo.Steps): a recurrence's GPU form computes one
// time step a launch, so one plan step is Steps launches of one kernel,
// each passed its index. The launches follow each other on the device's
// stream (and in the step's graph), which is the grid-wide barrier between
// time steps. A device whose own form of the kernel runs the whole loop
// (WholeLoops: the CPU backend's host forms) gets one launch.

// launchCounts is, per kernel, how many launches a step of it takes on dev.
func launchCounts(dev Device, ks []KernelInfo) []int {
	w, _ := dev.(WholeLoops)
	out := make([]int, len(ks))
	for i := range ks {
		out[i] = 1
		if k := &ks[i]; k.Steps > 1 && (w == nil || !w.RunsWhole(k)) {
			out[i] = k.Steps
		}
	}
	return out
}

// launch issues st's launches with the arguments args (a stepped kernel's
// last one is its launch index, set here for each launch).
func (s *Session) launch(st *Step, grid, block Dim3, args []Arg) error {
	f, n := s.fns[st.Kernel], s.launches[st.Kernel]
	if n == 1 {
		return s.dev.Launch(f, grid, block, st.Shared, args...)
	}
	last := len(args) - 1
	for i := 0; i < n; i++ {
		args[last] = s.launchIdx[i]
		if err := s.dev.Launch(f, grid, block, st.Shared, args...); err != nil {
			return fmt.Errorf("launch %d of %d: %w", i+1, n, err)
		}
	}
	return nil
}

// boxLaunchIndexes boxes 0..max(launches)-1 once, so that a stepped
// kernel's launches allocate nothing.
func boxLaunchIndexes(launches []int) []Arg {
	n := 1
	for _, l := range launches {
		n = max(n, l)
	}
	out := make([]Arg, n)
	for i := range out {
		out[i] = int32(i)
	}
	return out
}
