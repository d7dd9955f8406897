package runtime

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/ngen-ml/ngen/runtime/safetensors"
	"github.com/ngen-ml/ngen/runtime/schedule"
)

// Checkpoints are safetensors files (see README, "Checkpoint format"):
//   - parameters and declared state under their PyTorch state_dict names
//     (fc1.weight, bn1.running_mean), with their shapes and dtypes;
//   - optimizer state per parameter, as OptimizerPrefix + parameter name
//     + "." + PyTorch's key (__optimizer__.fc1.weight.exp_avg), the slices
//     of the flat vectors the fused update keeps;
//   - in __metadata__: the step count, learning rate, seed and dropout
//     counter, the learning-rate schedule (ngen.schedule: its JSON, or
//     "none" for a constant rate, SetLR's override included; with the
//     schedule's step count, ngen.schedule_step, it resumes a schedule
//     where it was: written for a model with a loss scaler, whose skipped
//     steps advance the schedule and not ngen.step), the run-time weight
//     decay (ngen.weight_decay, SetWeightDecay's), the run-time max norm
//     of gradient clipping (ngen.clip_norm, SetClipNorm's, "+Inf" when
//     off; written when the model compiles clipping in), the optimizer's
//     parameter groups (ngen.groups: their members and options, as JSON;
//     written when the model has groups, and a file with optimizer state
//     must have the model's), and ngen.sha256, the SHA-256 of the whole file with that
//     value's 64 hex digits read as zeros, so a flipped byte anywhere is
//     found.

// OptimizerPrefix starts the names of optimizer state in a checkpoint.
const OptimizerPrefix = "__optimizer__."

const sumKey = "ngen.sha256"

var zeroSum = strings.Repeat("0", 64)

// optState reports whether buffer b is the optimizer's (a flat vector the
// size of the parameters, named after the optimizer) and its PyTorch key.
func (s *Session) optState(b *Buffer) (string, bool) {
	k := s.plan.Optimizer.Kind
	if b.Role != "state" || k == "" || !strings.HasPrefix(b.Name, k+".") {
		return "", false
	}
	return strings.TrimPrefix(b.Name, k+"."), true
}

// ckptEntry is one tensor of the model's checkpoint: buffer buf, or the
// slice [off, off+n) of an optimizer vector.
type ckptEntry struct {
	buf    int
	off, n int64
	shape  []int64
	dtype  DType
	opt    bool
}

var stDType = map[DType]string{F32: "F32", F64: "F64", I32: "I32"}

// entries lists the model's checkpoint tensors in file order.
func (s *Session) entries() ([]string, map[string]ckptEntry, error) {
	var names []string
	ents := map[string]ckptEntry{}
	add := func(name string, e ckptEntry) {
		names = append(names, name)
		ents[name] = e
	}
	var params, opts []int
	for i := range s.plan.Buffers {
		b := &s.plan.Buffers[i]
		switch {
		case b.Role == "param":
			params = append(params, i)
		case b.Role == "state":
			if _, ok := s.optState(b); ok {
				opts = append(opts, i)
			}
		}
	}
	for i := range s.plan.Buffers {
		b := &s.plan.Buffers[i]
		if _, ok := s.optState(b); (b.Role != "param" && b.Role != "state") || ok {
			continue
		}
		sh, err := parseShape(b.Shape)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %s %s: %w", s.plan.Model, b.Role, b.Name, err)
		}
		add(b.Name, ckptEntry{buf: i, n: b.Elems.Eval(s.maxEnv), shape: sh, dtype: b.DType})
	}
	for _, o := range opts {
		key, _ := s.optState(&s.plan.Buffers[o])
		for _, p := range params {
			pb := &s.plan.Buffers[p]
			e := ents[pb.Name]
			add(OptimizerPrefix+pb.Name+"."+key, ckptEntry{buf: o, off: pb.Offset, n: e.n, shape: e.shape, dtype: pb.DType, opt: true})
		}
	}
	return names, ents, nil
}

// parseShape reads a buffer's shape from its type, "f32[512,784]".
func parseShape(t string) ([]int64, error) {
	i, j := strings.IndexByte(t, '['), strings.LastIndexByte(t, ']')
	if i < 0 || j < i {
		return nil, fmt.Errorf("no shape in %q", t)
	}
	out := []int64{}
	if t[i+1:j] == "" {
		return out, nil
	}
	for _, d := range strings.Split(t[i+1:j], ",") {
		n, err := strconv.ParseInt(d, 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("shape %q is not static", t)
		}
		out = append(out, n)
	}
	return out, nil
}

// readRaw copies n elements at element offset off of buffer buf.
func (s *Session) readRaw(buf int, off, n int64) ([]byte, error) {
	es := int64(s.plan.Buffers[buf].DType.Size())
	out := make([]byte, n*es)
	if n == 0 {
		return out, nil
	}
	return out, s.dev.CopyToHost(unsafe.Pointer(&out[0]), s.ptrs[buf]+Ptr(off*es), n*es)
}

// Save writes a safetensors checkpoint: parameters, declared state,
// optimizer state, step count, learning rate, seed and dropout counter,
// so a loaded session continues exactly as the saved one would.
//
// It refuses while micro-batches of a gradient accumulation are pending
// (Pending() > 0): the file holds no partial gradient sum, so the loaded
// model would not continue as the saved one. Finish the accumulation
// (Update, or the remaining micro-batches) first.
//
// Save makes one Write call with the whole file, built in memory first,
// so an error before it writes nothing; what a failed or interrupted
// Write leaves behind is the writer's affair. To replace a file so that a
// crash at any point leaves the old checkpoint or the new one, never a
// part, use SaveFile.
func (s *Session) Save(w io.Writer) error {
	if err := s.alive("Save"); err != nil {
		return err
	}
	if w == nil {
		return fmt.Errorf("%s: Save: the writer is nil", s.plan.Model)
	}
	if n := s.acc.pend; n > 0 {
		return fmt.Errorf("%s: Save: %d micro-batch(es) of gradient accumulation pending (%d per update): a checkpoint cannot hold a partial sum; run Update (RunUpdate) or the remaining micro-batches first", s.plan.Model, n, s.acc.k)
	}
	names, ents, err := s.entries()
	if err != nil {
		return err
	}
	var ts []safetensors.Tensor
	for _, n := range names {
		e := ents[n]
		data, err := s.readRaw(e.buf, e.off, e.n)
		if err != nil {
			return fmt.Errorf("%s: saving %s: %w", s.plan.Model, n, err)
		}
		ts = append(ts, safetensors.Tensor{Name: n, DType: stDType[e.dtype], Shape: e.shape, Data: data})
	}
	sched := "none"
	if s.sched != nil {
		j, err := json.Marshal(s.sched)
		if err != nil {
			return fmt.Errorf("%s: saving the schedule: %w", s.plan.Model, err)
		}
		sched = string(j)
	}
	meta := map[string]string{
		"format": "ngen", "ngen.model": s.plan.Model, "ngen.optimizer": s.plan.Optimizer.Kind,
		"ngen.step": strconv.Itoa(s.t), "ngen.lr": strconv.FormatFloat(s.lr, 'g', -1, 64), "ngen.schedule": sched,
		"ngen.seed": strconv.FormatUint(s.seed, 10), "ngen.dropout_counter": strconv.FormatUint(s.calls, 10),
		"ngen.weight_decay": strconv.FormatFloat(s.wd, 'g', -1, 64),
	}
	if s.plan.Optimizer.GradNorm() {
		meta["ngen.clip_norm"] = strconv.FormatFloat(s.clip, 'g', -1, 64)
	}
	if gs := s.plan.Optimizer.Groups; len(gs) > 0 {
		meta["ngen.groups"] = GroupsJSON(gs)
	}
	if s.scaler.on || s.schedT != s.t {
		// The schedule's counter: ngen.step plus the updates the loss
		// scaler skipped (loss_scale.go).
		meta["ngen.schedule_step"] = strconv.Itoa(s.schedT)
	}
	s.saveScaler(meta)
	b, err := encodeCheckpoint(meta, ts)
	if err != nil {
		return fmt.Errorf("%s: %w", s.plan.Model, err)
	}
	n, err := w.Write(b)
	if err == nil && n < len(b) {
		// A writer that breaks io.Writer's contract (a short write with
		// no error) left a truncated checkpoint and a nil error.
		err = fmt.Errorf("%s: Save: the writer took %d of %d bytes: %w", s.plan.Model, n, len(b), io.ErrShortWrite)
	}
	return err
}

// encodeCheckpoint renders a safetensors file with its ngen.sha256.
func encodeCheckpoint(meta map[string]string, ts []safetensors.Tensor) ([]byte, error) {
	m := map[string]string{sumKey: zeroSum}
	for k, v := range meta {
		if k != sumKey {
			m[k] = v
		}
	}
	b, err := safetensors.Encode(m, ts)
	if err != nil {
		return nil, err
	}
	field := []byte(`"` + sumKey + `":"` + zeroSum + `"`)
	at := bytes.Index(b, field) + len(field) - 65
	sum := sha256.Sum256(b)
	copy(b[at:], hex.EncodeToString(sum[:]))
	return b, nil
}

// Load reads a checkpoint written by Save (or by scripts/safetensors_io.py
// from PyTorch) for the same model. It checks everything before it
// changes anything: on any error the session is untouched. A successful
// Load drops pending micro-batches of a gradient accumulation: they are
// gradients of the weights it replaces, and the saved session had none.
func (s *Session) Load(r io.Reader) error {
	if err := s.alive("Load"); err != nil {
		return err
	}
	if r == nil {
		return fmt.Errorf("%s: Load: the reader is nil", s.plan.Model)
	}
	names, ents, err := s.entries()
	if err != nil {
		return err
	}
	var want int64
	for _, e := range ents {
		want += e.n * int64(e.dtype.Size())
	}
	// A checkpoint of this model is at most this long (PyTorch's
	// num_batches_tracked, which Load skips, adds 8 bytes per batch norm).
	limit := 8 + safetensors.MaxHeader + want + 8*int64(len(ents)) + 1
	b, err := io.ReadAll(io.LimitReader(r, limit))
	if err != nil {
		return fmt.Errorf("%s: reading checkpoint: %w", s.plan.Model, err)
	}
	if int64(len(b)) == limit {
		return fmt.Errorf("%s: checkpoint is longer than any checkpoint of this model", s.plan.Model)
	}
	c, err := decodeCheckpoint(b, names, ents, s.plan.Optimizer, s.lr, s.seed)
	if err != nil {
		return fmt.Errorf("%s: %w", s.plan.Model, err)
	}
	scaler, scalerSet, err := decodeScaler(c.meta, s.scaler)
	if err != nil {
		return fmt.Errorf("%s: checkpoint: %w", s.plan.Model, err)
	}
	// Everything is checked: write. Optimizer vectors are assembled on the
	// host (zeros when the checkpoint has none: a fresh optimizer).
	flat := map[int][]byte{}
	for _, n := range names {
		e := ents[n]
		es := int64(e.dtype.Size())
		if !e.opt {
			if err := s.writeRaw(e.buf, c.data[n]); err != nil {
				return err
			}
			continue
		}
		if flat[e.buf] == nil {
			flat[e.buf] = make([]byte, s.plan.Buffers[e.buf].Elems.Eval(s.maxEnv)*es)
		}
		if d, ok := c.data[n]; ok {
			copy(flat[e.buf][e.off*es:], d)
		}
	}
	for buf, d := range flat {
		if err := s.writeRaw(buf, d); err != nil {
			return err
		}
	}
	s.t, s.schedT, s.lr, s.seed, s.calls = c.step, c.schedStep, c.lr, c.seed, c.calls
	if c.schedSet {
		s.sched = c.sched
	}
	if c.wdSet {
		s.wd = c.wd
	}
	if c.clipSet {
		s.clip = c.clip
	}
	if scalerSet {
		s.scaler = scaler
	}
	a := &s.acc
	a.pend, a.rows, a.inGrads, a.inSum, a.foundInf = 0, 0, false, false, false
	s.markClock()
	return s.refreshBound()
}

// decoded is a checkpoint that passed every check.
type decoded struct {
	data        map[string][]byte // by tensor name
	step        int
	schedStep   int // the schedule's counter: step when the file has none
	lr          float64
	seed, calls uint64
	// sched is the file's schedule when schedSet (it has ngen.schedule);
	// a file without one leaves the session's.
	sched    *schedule.Schedule
	schedSet bool
	// wd is the file's run-time weight decay when wdSet.
	wd    float64
	wdSet bool
	// clip is the file's run-time max norm when clipSet.
	clip    float64
	clipSet bool
	// meta is the file's metadata (the loss scaler's, loss_scale.go).
	meta map[string]string
}

// decodeCheckpoint parses and checks a checkpoint against the model's
// tensors (names in file order, ents by name) and optimizer o; lr and seed
// are the values the session keeps when the file has none. It touches no
// device, so it is fuzzed on its own (FuzzDecodeCheckpoint).
func decodeCheckpoint(b []byte, names []string, ents map[string]ckptEntry, o Optimizer, lr float64, seed uint64) (*decoded, error) {
	f, err := safetensors.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	if err := verifySum(b, f); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	got := map[string][]byte{}
	for i := range f.Tensors {
		t := &f.Tensors[i]
		e, ok := ents[t.Name]
		if !ok {
			if isBatchCounter(t.Name, t.DType, t.Shape) {
				continue // PyTorch's batch norm counter; ngen has no use for it
			}
			return nil, fmt.Errorf("checkpoint has tensor %q, which this model lacks", t.Name)
		}
		if t.DType != stDType[e.dtype] || !slices.Equal(t.Shape, e.shape) {
			return nil, fmt.Errorf("checkpoint tensor %q is %s%v, the model's is %s%v", t.Name, t.DType, t.Shape, stDType[e.dtype], e.shape)
		}
		if k := nonFinite(t.Data, e.dtype); k >= 0 {
			return nil, fmt.Errorf("checkpoint tensor %q has a non-finite value at element %d", t.Name, k)
		}
		if k := negative(t.Data, e.dtype); k >= 0 && mustBeNonNegative(t.Name) {
			return nil, fmt.Errorf("checkpoint tensor %q has a negative value at element %d (a mean of squares or a variance)", t.Name, k)
		}
		got[t.Name] = t.Data
	}
	nOpt, haveOpt := 0, 0
	for _, n := range names {
		e := ents[n]
		_, ok := got[n]
		if e.opt {
			nOpt++
			if ok {
				haveOpt++
			}
			continue
		}
		if !ok {
			return nil, fmt.Errorf("checkpoint lacks tensor %q", n)
		}
	}
	if haveOpt != 0 && haveOpt != nOpt {
		return nil, fmt.Errorf("checkpoint has %d of the %d optimizer state tensors (%s...): all or none", haveOpt, nOpt, OptimizerPrefix)
	}
	c := &decoded{data: got, meta: f.Metadata}
	c.step, c.lr, c.seed, c.calls, err = counters(f.Metadata, haveOpt > 0, lr, seed)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	if c.schedStep, err = scheduleStep(f.Metadata, c.step, haveOpt > 0); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	if err := checkAdamState(o, c.step, names, ents, got); err != nil {
		return nil, err
	}
	if err := checkGroups(f.Metadata, o.Groups, haveOpt > 0); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	if v, ok := f.Metadata["ngen.weight_decay"]; ok {
		x, e := strconv.ParseFloat(v, 64)
		if e == nil {
			e = checkDecay(x)
		}
		if e != nil {
			return nil, fmt.Errorf("checkpoint: ngen.weight_decay %q: %v", v, e)
		}
		c.wd, c.wdSet = x, true
	}
	if c.clip, c.clipSet, err = decodeClipNorm(f.Metadata, o, haveOpt > 0); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	if v, ok := f.Metadata["ngen.schedule"]; ok {
		c.sched, err = decodeSchedule(v, c.lr)
		if err != nil {
			return nil, fmt.Errorf("checkpoint: ngen.schedule %q: %w", v, err)
		}
		c.schedSet = true
	}
	return c, nil
}

// decodeSchedule reads ngen.schedule: "none" or a schedule's JSON, checked
// for base rate lr as SetSchedule checks it.
func decodeSchedule(v string, lr float64) (*schedule.Schedule, error) {
	if v == "none" {
		return nil, nil
	}
	var sc schedule.Schedule
	dec := json.NewDecoder(strings.NewReader(v))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sc); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("trailing data after the schedule")
	}
	if problem := sc.Check(lr); problem != "" {
		return nil, fmt.Errorf("%s", problem)
	}
	return &sc, nil
}

func (s *Session) writeRaw(buf int, d []byte) error {
	if len(d) == 0 {
		return nil
	}
	return s.dev.CopyToDevice(s.ptrs[buf], unsafe.Pointer(&d[0]), int64(len(d)))
}

// verifySum checks ngen.sha256 (see the format above).
func verifySum(b []byte, f *safetensors.File) error {
	sum, ok := f.Metadata[sumKey]
	if !ok {
		return fmt.Errorf("no %s in __metadata__ (write it as scripts/safetensors_io.py does)", sumKey)
	}
	if len(sum) != 64 || strings.Trim(sum, "0123456789abcdef") != "" {
		return fmt.Errorf("%s %q is not 64 lower-case hex digits", sumKey, sum)
	}
	field := []byte(`"` + sumKey + `":"` + sum + `"`)
	at := bytes.Index(f.Header, field)
	if at < 0 || bytes.Count(f.Header, field) != 1 {
		return fmt.Errorf("%s must appear once, unescaped", sumKey)
	}
	c := bytes.Clone(b)
	copy(c[8+at+len(field)-65:], zeroSum)
	got := sha256.Sum256(c)
	if hex.EncodeToString(got[:]) != sum {
		return fmt.Errorf("SHA-256 mismatch: the file is corrupt (%s says %s, the data hash to %x)", sumKey, sum, got)
	}
	return nil
}

// counters reads the session counters from the metadata; absent ones
// start fresh (a file from PyTorch without optimizer state starts at step
// 0 with the current learning rate).
func counters(meta map[string]string, withOpt bool, lr float64, seed uint64) (step int, _ float64, _, calls uint64, err error) {
	if v, ok := meta["ngen.step"]; ok {
		n, e := strconv.ParseInt(v, 10, 64)
		if e != nil || n < 0 || n > 1<<53 {
			return 0, 0, 0, 0, fmt.Errorf("ngen.step %q is not a step count", v)
		}
		step = int(n)
	}
	if !withOpt {
		step = 0
	}
	if v, ok := meta["ngen.lr"]; ok {
		x, e := strconv.ParseFloat(v, 64)
		if e == nil {
			e = checkLR(x) // as SetLR
		}
		if e != nil {
			return 0, 0, 0, 0, fmt.Errorf("ngen.lr %q is not a learning rate: %v", v, e)
		}
		lr = x
	}
	for _, kv := range []struct {
		key string
		dst *uint64
	}{{"ngen.seed", &seed}, {"ngen.dropout_counter", &calls}} {
		if v, ok := meta[kv.key]; ok {
			n, e := strconv.ParseUint(v, 10, 64)
			if e != nil {
				return 0, 0, 0, 0, fmt.Errorf("%s %q is not a count", kv.key, v)
			}
			*kv.dst = n
		}
	}
	return step, lr, seed, calls, nil
}

// scheduleStep reads ngen.schedule_step, the schedule's counter, which
// runs ahead of ngen.step by the updates a loss scaler skipped. A file
// without it (from before skipped steps advanced the schedule, or from a
// run without a scaler) has none skipped: step. Like step, it is 0 for a
// file without optimizer state.
func scheduleStep(meta map[string]string, step int, withOpt bool) (int, error) {
	v, ok := meta["ngen.schedule_step"]
	if !ok || !withOpt {
		return step, nil
	}
	n, e := strconv.ParseInt(v, 10, 64)
	if e != nil || n < int64(step) || n > 1<<53 {
		return 0, fmt.Errorf("ngen.schedule_step %q is not a step count of at least ngen.step (%d)", v, step)
	}
	return int(n), nil
}

// nonFinite is the index of the first NaN or ±Inf in d, or -1.
func nonFinite(d []byte, dt DType) int {
	switch dt {
	case F32:
		for k := 0; k+4 <= len(d); k += 4 {
			bits := uint32(d[k]) | uint32(d[k+1])<<8 | uint32(d[k+2])<<16 | uint32(d[k+3])<<24
			if bits&0x7f800000 == 0x7f800000 {
				return k / 4
			}
		}
	case F64:
		for k := 0; k+8 <= len(d); k += 8 {
			var bits uint64
			for j := 7; j >= 0; j-- {
				bits = bits<<8 | uint64(d[k+j])
			}
			if bits&0x7ff0000000000000 == 0x7ff0000000000000 {
				return k / 8
			}
		}
	}
	return -1
}
