package runtime

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"unsafe"
)

// Buffer lookup and host transfers.

// Lookup finds a buffer by role and name ("param" "fc1.weight", "grad"
// "fc1.weight", "input" "x", "output" "loss").
func (s *Session) Lookup(role, name string) (int, error) {
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
	for _, b := range s.plan.Buffers {
		if b.Role == role {
			out = append(out, b.Name)
		}
	}
	return out
}

// Elems is the element count of buffer i at the current batch size.
func (s *Session) Elems(i int) int { return int(s.plan.Buffers[i].Elems.Eval(s.env)) }

// WriteInput copies host data into an input buffer for a batch of rows
// rows. data must be a []float32, []float64 or []int32 matching the
// buffer's dtype and holding exactly the batch's elements.
func (s *Session) WriteInput(name string, data any, rows int) error {
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
	return s.dev.CopyToDevice(s.ptrs[i], ptr, want*int64(dt.Size()))
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
	return nil, 0, 0, fmt.Errorf("unsupported host type %T", data)
}

// ReadFloats returns buffer i at the current batch size as float64s.
func (s *Session) ReadFloats(i int) ([]float64, error) {
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
	return s.dev.CopyToHost(ptr, s.ptrs[i], int64(n*dt.Size()))
}

// WriteFloats sets buffer i (a static-size buffer) from float64s.
func (s *Session) WriteFloats(i int, vals []float64) error {
	if want := s.Elems(i); len(vals) != want {
		b := &s.plan.Buffers[i]
		return fmt.Errorf("%s: %s %s has %d elements, got %d", s.plan.Model, b.Role, b.Name, want, len(vals))
	}
	return s.writeFloats(i, vals)
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

// check runs the plan's checks for function fn after it ran.
func (s *Session) check(fn string) error {
	for _, c := range s.plan.Checks {
		if c.Func != fn {
			continue
		}
		switch c.Kind {
		case "status":
			var st [4]int32
			if err := s.dev.CopyToHost(unsafe.Pointer(&st[0]), s.ptrs[c.Buf], 16); err != nil {
				return err
			}
			// Each checked op raises its own code (0: a plan from before
			// codes, where cross-entropy raised 1).
			if st[0] != 0 && (int(st[0]) == c.Code || c.Code == 0) {
				// Clear the flag so that the session stays usable.
				if err := s.dev.Memset(s.ptrs[c.Buf], 0, 16); err != nil {
					return err
				}
				what, where := "label", "row"
				if c.Detail != "" {
					what, where = c.Detail, "position"
				}
				return fmt.Errorf("%s (%s): %s: %s %d at %s %d is out of range [0,%d)", c.Op, c.Pos, s.plan.Model, what, st[1], where, st[2], st[3])
			}
		case "finite":
			v, err := s.ReadFloats(c.Buf)
			if err != nil {
				return err
			}
			for _, x := range v {
				if math.IsNaN(x) || math.IsInf(x, 0) {
					return fmt.Errorf("%s (%s): %s: %s is %v at step %d", c.Op, c.Pos, s.plan.Model, c.Detail, x, s.t)
				}
			}
		}
	}
	return nil
}

const checkpointMagic = "NGENCKP2"

// Save writes a checkpoint: every parameter and optimizer state buffer by
// name, the step count, the learning rate and the dropout seed and
// counter, so a loaded session continues exactly as the saved one would.
func (s *Session) Save(w io.Writer) error {
	bw := bufio.NewWriter(w)
	bw.WriteString(checkpointMagic)
	hdr := []uint64{uint64(s.t), math.Float64bits(s.lr), s.calls, s.seed}
	if err := binary.Write(bw, binary.LittleEndian, hdr); err != nil {
		return err
	}
	for i := range s.plan.Buffers {
		b := &s.plan.Buffers[i]
		if b.Role != "param" && b.Role != "state" {
			continue
		}
		vals, err := s.ReadFloats(i)
		if err != nil {
			return err
		}
		key := b.Role + ":" + b.Name
		binary.Write(bw, binary.LittleEndian, uint32(len(key)))
		bw.WriteString(key)
		binary.Write(bw, binary.LittleEndian, uint64(len(vals)))
		if err := binary.Write(bw, binary.LittleEndian, vals); err != nil {
			return err
		}
	}
	binary.Write(bw, binary.LittleEndian, uint32(0))
	return bw.Flush()
}

// Load reads a checkpoint written by Save for the same model. Nothing is
// changed unless the whole checkpoint matches.
func (s *Session) Load(r io.Reader) error {
	br := bufio.NewReader(r)
	magic := make([]byte, len(checkpointMagic))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != checkpointMagic {
		return fmt.Errorf("%s: not an ngen checkpoint", s.plan.Model)
	}
	var hdr [4]uint64
	if err := binary.Read(br, binary.LittleEndian, &hdr); err != nil {
		return fmt.Errorf("%s: checkpoint header: %w", s.plan.Model, err)
	}
	pending := map[int][]float64{}
	for {
		var n uint32
		if err := binary.Read(br, binary.LittleEndian, &n); err != nil {
			return fmt.Errorf("%s: truncated checkpoint: %w", s.plan.Model, err)
		}
		if n == 0 {
			break
		}
		if n > 1<<16 {
			return fmt.Errorf("%s: corrupt checkpoint", s.plan.Model)
		}
		key := make([]byte, n)
		if _, err := io.ReadFull(br, key); err != nil {
			return err
		}
		var cnt uint64
		if err := binary.Read(br, binary.LittleEndian, &cnt); err != nil {
			return err
		}
		idx := -1
		for i := range s.plan.Buffers {
			b := &s.plan.Buffers[i]
			if (b.Role == "param" || b.Role == "state") && b.Role+":"+b.Name == string(key) {
				idx = i
			}
		}
		if idx < 0 {
			return fmt.Errorf("%s: checkpoint has %q, which this model lacks", s.plan.Model, key)
		}
		if int(cnt) != s.Elems(idx) {
			return fmt.Errorf("%s: checkpoint %q has %d elements, model has %d", s.plan.Model, key, cnt, s.Elems(idx))
		}
		vals := make([]float64, cnt)
		if err := binary.Read(br, binary.LittleEndian, vals); err != nil {
			return fmt.Errorf("%s: truncated checkpoint at %q", s.plan.Model, key)
		}
		pending[idx] = vals
	}
	for i := range s.plan.Buffers {
		b := &s.plan.Buffers[i]
		if (b.Role == "param" || b.Role == "state") && pending[i] == nil {
			return fmt.Errorf("%s: checkpoint lacks %s %q", s.plan.Model, b.Role, b.Name)
		}
	}
	var errs []error
	for i, v := range pending {
		errs = append(errs, s.writeFloats(i, v))
	}
	s.t, s.lr, s.calls, s.seed = int(hdr[0]), math.Float64frombits(hdr[1]), hdr[2], hdr[3]
	return errors.Join(errs...)
}
