package runtime

import (
	"fmt"
	"math"
	"reflect"
	"unsafe"
)

// Buffer lookup and host transfers.

// Lookup finds a buffer by role and name ("param" "fc1.weight", "grad"
// "fc1.weight", "input" "x", "output" "loss").
func (s *Session) Lookup(role, name string) (int, error) {
	if s == nil {
		return -1, s.alive("Lookup")
	}
	for i := range s.plan.Buffers {
		b := &s.plan.Buffers[i]
		if b.Role == role && b.Name == name {
			return i, nil
		}
	}
	return -1, fmt.Errorf("%s: no %s named %q", s.plan.Model, role, name)
}

// Names lists the buffer names with a role, in plan order.
func (s *Session) Names(role string) []string {
	var out []string
	if s == nil {
		return nil
	}
	for _, b := range s.plan.Buffers {
		if b.Role == role {
			out = append(out, b.Name)
		}
	}
	return out
}

// Elems is the element count of buffer i at the current batch size.
// An unknown buffer has none, rather than a panic.
func (s *Session) Elems(i int) int {
	if i < 0 || i >= len(s.plan.Buffers) {
		return 0
	}
	return int(s.plan.Buffers[i].Elems.Eval(s.env))
}

// WriteInput copies host data into an input buffer for a batch of rows
// rows. data must be a []float32, []float64 or []int32 matching the
// buffer's dtype and holding exactly the batch's elements.
func (s *Session) WriteInput(name string, data any, rows int) error {
	return s.writeInput(name, data, rows, true)
}

// WriteStepInput is WriteInput for a training step (the generated Step
// and Accumulate call it): it skips WriteInput's scan of the data for NaN
// and ±Inf, which only inference uses to refuse its input (a training
// step's guard judges its loss and gradients on the device instead), so
// a step's host part does not read the whole batch once more. An
// inference run on an input written so scans the device's copy first.
func (s *Session) WriteStepInput(name string, data any, rows int) error {
	return s.writeInput(name, data, rows, false)
}

func (s *Session) writeInput(name string, data any, rows int, scan bool) error {
	if err := s.alive("WriteInput"); err != nil {
		return err
	}
	i, err := s.Lookup("input", name)
	if err != nil {
		return err
	}
	b := &s.plan.Buffers[i]
	if rows <= 0 || rows > s.maxEnv["B"] {
		return fmt.Errorf("%s: input %q: batch of %d rows, want 1..%d (the session's batch size)", s.plan.Model, name, rows, s.maxEnv["B"])
	}
	env := map[string]int{}
	for k, v := range s.maxEnv {
		env[k] = v
	}
	env["B"] = rows
	want := b.Elems.Eval(env)
	ptr, n, dt, err := hostSlice(data)
	if err != nil {
		return fmt.Errorf("%s: input %s: %w", s.plan.Model, name, err)
	}
	if dt != b.DType {
		return fmt.Errorf("%s: input %s: want %s data, got %s", s.plan.Model, name, b.DType, dt)
	}
	if int64(n) != want {
		return fmt.Errorf("%s: input %q%s has shape %s: a batch of %d needs %d elements, got %d", s.plan.Model, name, declared(b), b.Shape, rows, want, n)
	}
	if n == 0 {
		return nil
	}
	if dst, f, ok := s.inputDst(i); ok {
		// Pipelined, on the copy stream, into the set the step in
		// flight does not read (pipeline_inputs.go).
		err = s.dev.(CopyStreamer).CopyToDeviceAfter(f, dst, ptr, want*int64(dt.Size()))
	} else {
		err = s.dev.CopyToDevice(s.ptrs[i], ptr, want*int64(dt.Size()))
	}
	if err != nil {
		return err
	}
	if !scan {
		if s.unscanned == nil {
			s.unscanned = make([]bool, len(s.plan.Buffers))
		}
		s.unscanned[i] = true
		if len(s.nonFinite) > 0 {
			delete(s.nonFinite, i)
		}
		return nil
	}
	if s.unscanned != nil {
		s.unscanned[i] = false
	}
	s.noteFinite(i, data)
	return nil
}

// scanInput scans the device's copy of input buffer i, written by
// WriteStepInput, as WriteInput scans its data (noteFinite).
func (s *Session) scanInput(i int) error {
	s.unscanned[i] = false
	if dt := s.plan.Buffers[i].DType; dt != F32 && dt != F64 { // inputs are f32, f64 or i32
		return nil
	}
	v, err := s.ReadFloats(i)
	if err != nil {
		return err
	}
	s.noteFinite(i, v)
	return nil
}

// noteFinite records whether input buffer i, just written from data, holds
// a NaN or ±Inf (Run refuses inference on it).
func (s *Session) noteFinite(i int, data any) {
	at, v := -1, 0.0
	switch d := data.(type) {
	case []float32:
		if at = firstNonFinite32(d); at >= 0 {
			v = float64(d[at])
		}
	case []float64:
		if at = firstNonFinite64(d); at >= 0 {
			v = d[at]
		}
	}
	if at < 0 {
		delete(s.nonFinite, i)
		return
	}
	if s.nonFinite == nil {
		s.nonFinite = map[int]badValue{}
	}
	s.nonFinite[i] = badValue{at, v}
}

// declared is " (file:line)" of an input's declaration, or "".
func declared(b *Buffer) string {
	if b.Pos == "" {
		return ""
	}
	return " (" + b.Pos + ")"
}

func hostSlice(data any) (unsafe.Pointer, int, DType, error) {
	switch d := data.(type) {
	case []float32:
		if len(d) == 0 {
			return nil, 0, F32, nil
		}
		return unsafe.Pointer(&d[0]), len(d), F32, nil
	case []float64:
		if len(d) == 0 {
			return nil, 0, F64, nil
		}
		return unsafe.Pointer(&d[0]), len(d), F64, nil
	case []int32:
		if len(d) == 0 {
			return nil, 0, I32, nil
		}
		return unsafe.Pointer(&d[0]), len(d), I32, nil
	}
	// reflect.TypeOf, not fmt's %T: data must not escape, so that a
	// caller's slice boxed into it stays on the stack (a step allocates
	// nothing for its inputs, hostcost_test.go).
	return nil, 0, 0, fmt.Errorf("unsupported host type %s", reflect.TypeOf(data))
}

// ReadFloats returns buffer i at the current batch size as float64s.
func (s *Session) ReadFloats(i int) ([]float64, error) {
	if err := s.alive("ReadFloats"); err != nil {
		return nil, err
	}
	if i < 0 || i >= len(s.plan.Buffers) {
		return nil, fmt.Errorf("%s: no buffer %d", s.plan.Model, i)
	}
	b := &s.plan.Buffers[i]
	n := s.Elems(i)
	out := make([]float64, n)
	if n == 0 {
		return out, nil
	}
	switch b.DType {
	case F32:
		tmp := make([]float32, n)
		if err := s.dev.CopyToHost(unsafe.Pointer(&tmp[0]), s.ptrs[i], int64(n)*4); err != nil {
			return nil, err
		}
		for k, v := range tmp {
			out[k] = float64(v)
		}
	case F64:
		if err := s.dev.CopyToHost(unsafe.Pointer(&out[0]), s.ptrs[i], int64(n)*8); err != nil {
			return nil, err
		}
	case I32:
		tmp := make([]int32, n)
		if err := s.dev.CopyToHost(unsafe.Pointer(&tmp[0]), s.ptrs[i], int64(n)*4); err != nil {
			return nil, err
		}
		for k, v := range tmp {
			out[k] = float64(v)
		}
	}
	return out, nil
}

// Read copies buffer i into dst, a []float32/[]float64/[]int32 of exactly
// its current element count.
func (s *Session) Read(i int, dst any) error {
	if err := s.alive("Read"); err != nil {
		return err
	}
	if i < 0 || i >= len(s.plan.Buffers) {
		return fmt.Errorf("%s: no buffer %d", s.plan.Model, i)
	}
	b := &s.plan.Buffers[i]
	ptr, n, dt, err := hostSlice(dst)
	if err != nil {
		return err
	}
	if dt != b.DType || n != s.Elems(i) {
		return fmt.Errorf("%s: reading %s %s: want %d %s elements, have room for %d %s", s.plan.Model, b.Role, b.Name, s.Elems(i), b.DType, n, dt)
	}
	if n == 0 {
		return nil
	}
	if err := s.dev.CopyToHost(ptr, s.ptrs[i], int64(n*dt.Size())); err != nil {
		return err
	}
	// An output of inference from finite inputs (finiteInputs) that is
	// NaN or ±Inf is a forward pass that overflowed (inputs of 3e38):
	// Predict returned it with no error, as PyTorch does.
	if f := s.ran; f != nil && dt != I32 {
		for _, o := range f.Outputs {
			if o.Buf != i {
				continue
			}
			if k := nonFinite(unsafe.Slice((*byte)(ptr), n*dt.Size()), dt); k >= 0 {
				return fmt.Errorf("%s.%s: output %q: element %d is not finite although the inputs are: the forward pass overflowed", s.plan.Model, f.Name, o.Name, k)
			}
		}
	}
	return nil
}

// WriteFloats sets buffer i (a static-size buffer) from float64s.
func (s *Session) WriteFloats(i int, vals []float64) error {
	if err := s.alive("WriteFloats"); err != nil {
		return err
	}
	if i < 0 || i >= len(s.plan.Buffers) {
		return fmt.Errorf("%s: no buffer %d", s.plan.Model, i)
	}
	if want := s.Elems(i); len(vals) != want {
		b := &s.plan.Buffers[i]
		return fmt.Errorf("%s: %s %s has %d elements, got %d", s.plan.Model, b.Role, b.Name, want, len(vals))
	}
	// A parameter is held to Load's rule: a non-finite weight (or one that
	// overflows float32) would fail every later step, far from its cause.
	b := &s.plan.Buffers[i]
	if b.Role == "param" {
		for k, v := range vals {
			if math.IsNaN(v) || math.IsInf(v, 0) || (b.DType == F32 && math.Abs(v) > math.MaxFloat32) {
				return fmt.Errorf("%s: param %s: element %d is %v, not a finite %s", s.plan.Model, b.Name, k, v, b.DType)
			}
		}
	}
	if err := s.writeFloats(i, vals); err != nil {
		return err
	}
	switch b.Role {
	case "input":
		s.noteFinite(i, vals)
	case "param", "params", "state":
		return s.raiseBound(i, vals) // the update check's bound covers the new values
	}
	return nil
}

func (s *Session) writeFloats(i int, vals []float64) error {
	if len(vals) == 0 {
		return nil
	}
	b := &s.plan.Buffers[i]
	switch b.DType {
	case F32:
		tmp := make([]float32, len(vals))
		for k, v := range vals {
			tmp[k] = float32(v)
		}
		return s.dev.CopyToDevice(s.ptrs[i], unsafe.Pointer(&tmp[0]), int64(len(tmp))*4)
	case F64:
		return s.dev.CopyToDevice(s.ptrs[i], unsafe.Pointer(&vals[0]), int64(len(vals))*8)
	}
	return fmt.Errorf("%s: %s %s is not a float buffer", s.plan.Model, b.Role, b.Name)
}

// firstNonFinite32 is the index of d's first NaN or ±Inf, or -1. It runs
// on every training step's inputs (the seed MLP's batch of 128 is 100,352
// values), so it tests two values per 64-bit word without a branch: a
// float's exponent field is all ones exactly when adding one to it
// carries into the sign bit's place, which the mask has cleared. On the
// 2-core AMD EPYC (AVX2) that batch takes 28.6 µs against the plain
// loop's 81.5 (x-x != 0 per value, which Go does not vectorise;
// BenchmarkFirstNonFinite); only a batch that has such a value is
// scanned again for its first.
func firstNonFinite32(d []float32) int {
	const exp, one, carry = 0x7f8000007f800000, 0x0080000000800000, 0x8000000080000000
	var acc uint64
	rest := d
	if len(rest) > 0 && uintptr(unsafe.Pointer(&rest[0]))%8 != 0 {
		acc |= uint64(math.Float32bits(rest[0]))&exp + one
		rest = rest[1:]
	}
	if len(rest)%2 != 0 {
		acc |= uint64(math.Float32bits(rest[len(rest)-1]))&exp + one
		rest = rest[:len(rest)-1]
	}
	if len(rest) > 0 {
		// Aligned words of two values each (checkptr, under -race,
		// checks the alignment).
		words := unsafe.Slice((*uint64)(unsafe.Pointer(&rest[0])), len(rest)/2)
		var a1, a2, a3 uint64
		for len(words) >= 4 {
			acc |= words[0]&exp + one
			a1 |= words[1]&exp + one
			a2 |= words[2]&exp + one
			a3 |= words[3]&exp + one
			words = words[4:]
		}
		for _, w := range words {
			acc |= w&exp + one
		}
		acc |= a1 | a2 | a3
	}
	if acc&carry == 0 {
		return -1
	}
	for k, x := range d {
		if x-x != 0 {
			return k
		}
	}
	return -1
}

// firstNonFinite64 is firstNonFinite32 for float64s.
func firstNonFinite64(d []float64) int {
	const exp, one, carry = 0x7ff0000000000000, 0x0010000000000000, 0x8000000000000000
	var a0, a1 uint64
	i := 0
	for ; i+4 <= len(d); i += 4 {
		a0 |= (math.Float64bits(d[i])&exp + one) | (math.Float64bits(d[i+1])&exp + one)
		a1 |= (math.Float64bits(d[i+2])&exp + one) | (math.Float64bits(d[i+3])&exp + one)
	}
	for ; i < len(d); i++ {
		a0 |= math.Float64bits(d[i])&exp + one
	}
	if (a0|a1)&carry == 0 {
		return -1
	}
	for k, x := range d {
		if x-x != 0 {
			return k
		}
	}
	return -1
}
